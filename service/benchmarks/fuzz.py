"""A seeded fuzz of malformed requests against a live server: how each kind of bad input was
answered, and whether the server still answers a good query correctly afterwards.

Every request is one of the KINDS below — a mutation of a good SearchRequest (empty, huge or
random text; random bytes as an image; vectors of random dimension, with NaN/Inf, or of extreme
magnitude; random enum integers, top_k, concept references and metadata fields; a Query with no
kind set or two kinds on the wire), a BatchSearch of mutated requests, a mutated Explain,
ListConcepts or GetConcept, or raw bytes (random, truncated or bit-flipped serializations) sent
through a generic `channel.unary_unary` with identity serializers. Requests are drawn from
`random.Random(seed)` up front (the same seed, the same requests), then sent by `concurrency`
client threads until all are answered or `max_seconds` have passed.

A healthy server answers every one with OK, INVALID_ARGUMENT, NOT_FOUND or RESOURCE_EXHAUSTED;
anything else (INTERNAL, UNKNOWN, UNAVAILABLE, ...) is reported under `unexpected`. Afterwards
the good query must return the hits it returned before the fuzz, health must say SERVING, and
— when the fuzz started the server itself — the server process must still be running.

    python -m service.benchmarks.fuzz --requests 10000 --seed 0 --max-seconds 120
    python -m service.benchmarks.fuzz --target 127.0.0.1:50051     # a server already running
    python -m service.benchmarks.fuzz --bundles runs/bundles       # serve this bundle and fuzz it

`run_fuzz(target, requests, seed, max_seconds)` is the importable core (the soak script's).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service._generated.strata.v1 import search_pb2 as pb
from service.convert import MAX_MESSAGE_BYTES
from service.limits import LIMITS
from training.benchmarks import publish

SERVICE = "/strata.v1.SearchService/"
EXPECTED_CODES = frozenset({"OK", "INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED"})
GOOD_QUERY = "a dog"
CALL_TIMEOUT_S = 60.0
WORDS = (
    "a", "dog", "red", "cat", "chasing", "ball", "on", "the", "beach", "man", "riding", "horse",
    "in", "park", "two", "children", "blue", "car", "white", "bird", "while", "who", ",", ".",
)  # fmt: skip


@dataclass(frozen=True)
class Target:
    """What the generators need to know of the served bundle."""

    dim: int
    concepts: int
    metadata_fields: tuple[str, ...]
    rows: int


@dataclass(frozen=True)
class FuzzRequest:
    kind: str
    method: str
    payload: bytes


# --- generators: each draws one request of its kind ---------------------------------------------


def _int32(rng: random.Random) -> int:
    edges = (0, 1, -1, 2**31 - 1, -(2**31), 1000, 1001, 6, 7, 5)
    return rng.choice(edges) if rng.random() < 0.3 else rng.randint(-(2**31), 2**31 - 1)


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))


def _unicode(rng: random.Random, length: int) -> str:
    chars = []
    while len(chars) < length:
        code = rng.choice(
            (rng.randint(0, 0x7F), rng.randint(0x80, 0xFFFF), rng.randint(0, 0x10FFFF))
        )
        if not 0xD800 <= code <= 0xDFFF:  # proto strings are UTF-8: no lone surrogates
            chars.append(chr(code))
    return "".join(chars)


def _good(rng: random.Random) -> pb.SearchRequest:
    return pb.SearchRequest(
        query=pb.Query(text=_text(rng)), granularity=rng.randint(0, 6), top_k=rng.randint(1, 20)
    )


def _float32(value: float) -> float:
    """`value` as the nearest float32 (what the wire carries)."""
    return struct.unpack("f", struct.pack("f", value))[0] if math.isfinite(value) else value


def _vector(rng: random.Random, dim: int, scale: Callable[[], float]) -> pb.Query:
    return pb.Query(vector=pb.FloatVector(values=[_float32(scale()) for _ in range(dim)]))


def _ref(rng: random.Random, t: Target) -> pb.ConceptRef:
    which = rng.randrange(4)
    if which == 0:
        return pb.ConceptRef(id=rng.randrange(t.concepts) if rng.random() < 0.5 else _int32(rng))
    if which == 1:
        sign = rng.choice("+-")
        number = rng.randrange(t.concepts // 2) if rng.random() < 0.5 else _int32(rng)
        return pb.ConceptRef(label=rng.choice((f"{sign}{number}", _unicode(rng, 4), "", "+")))
    if which == 2:
        return pb.ConceptRef(name=rng.choice((rng.choice(WORDS), _unicode(rng, 6), "")))
    return pb.ConceptRef()


def search_mutation(kind: str, rng: random.Random, t: Target) -> pb.SearchRequest:
    """A SearchRequest of one of the SEARCH_KINDS."""
    request = _good(rng)
    if kind == "good":
        pass
    elif kind == "text_empty":
        request.query.text = rng.choice(("", " ", "\n\t ", "\u3000", "\u00a0" * 3))
    elif kind == "text_huge":
        request.query.text = "dog " * rng.randint(501, 20_000)
    elif kind == "text_random":
        request.query.text = _unicode(rng, rng.randint(1, 300))
    elif kind == "image_random":
        request.query.image = rng.randbytes(rng.randint(0, 4096))
    elif kind == "vector_dim":
        dim = rng.choice((0, 1, t.dim - 1, t.dim + 1, rng.randint(0, 4 * t.dim)))
        request.query.CopyFrom(_vector(rng, dim, lambda: rng.gauss(0, 1)))
    elif kind == "vector_nonfinite":
        query = _vector(rng, t.dim, lambda: rng.gauss(0, 1))
        for _ in range(rng.randint(1, 5)):
            position = rng.randrange(t.dim)
            query.vector.values[position] = rng.choice((math.nan, math.inf, -math.inf))
        request.query.CopyFrom(query)
    elif kind == "vector_extreme":
        exponent = rng.choice((rng.uniform(-45, -20), rng.uniform(20, 38), 0.0))
        request.query.CopyFrom(_vector(rng, t.dim, lambda: rng.gauss(0, 1) * 10**exponent))
    elif kind == "granularity_int":
        request.granularity = _int32(rng)
    elif kind == "top_k_int":
        request.top_k = _int32(rng)
    elif kind == "concepts":
        for _ in range(rng.randint(1, 4)):
            rng.choice((request.filter.require, request.filter.exclude)).append(_ref(rng, t))
    elif kind == "metadata":
        pool = [*t.metadata_fields, "id", "", _unicode(rng, 5), rng.choice(WORDS)]
        request.metadata_fields.extend(rng.choice(pool) for _ in range(rng.randint(1, 5)))
        request.explain = rng.random() < 0.5
    elif kind == "query_unset":
        request.ClearField("query")
    else:
        raise ValueError(f"unknown search kind {kind!r}")
    return request


SEARCH_KINDS = (
    "good", "text_empty", "text_huge", "text_random", "image_random", "vector_dim",
    "vector_nonfinite", "vector_extreme", "granularity_int", "top_k_int", "concepts", "metadata",
    "query_unset",
)  # fmt: skip


def _oneof_clash(rng: random.Random, t: Target) -> bytes:
    """A Query carrying two kinds on the wire (text and vector or image; the parser keeps the
    last), as a serialized SearchRequest."""
    parts = [
        pb.Query(text=_text(rng)).SerializeToString(),
        _vector(rng, rng.choice((t.dim, 3)), lambda: rng.gauss(0, 1)).SerializeToString(),
        pb.Query(image=rng.randbytes(16)).SerializeToString(),
    ]
    rng.shuffle(parts)
    query = b"".join(parts[: rng.randint(2, 3)])
    return pb.SearchRequest(top_k=3).SerializeToString() + b"\x0a" + _varint(len(query)) + query


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _bitflip(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return rng.randbytes(8)
    flipped = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
    return bytes(flipped)


def draw(kind: str, rng: random.Random, t: Target) -> FuzzRequest:
    """One request of `kind` (one of KINDS)."""
    if kind in SEARCH_KINDS:
        return FuzzRequest(kind, "Search", search_mutation(kind, rng, t).SerializeToString())
    if kind == "oneof_clash":
        return FuzzRequest(kind, "Search", _oneof_clash(rng, t))
    if kind == "raw_random":
        return FuzzRequest(kind, "Search", rng.randbytes(rng.randint(0, 512)))
    if kind == "raw_truncated":
        whole = search_mutation(rng.choice(SEARCH_KINDS[:4]), rng, t).SerializeToString()
        return FuzzRequest(kind, "Search", whole[: rng.randint(0, max(0, len(whole) - 1))])
    if kind == "raw_bitflip":
        whole = _good(rng).SerializeToString()
        method = rng.choice(("Search", "Explain", "GetConcept", "ListConcepts", "BatchSearch"))
        return FuzzRequest(kind, method, _bitflip(rng, whole))
    if kind == "batch":
        if rng.random() < 0.05:  # oversize: one request more than allowed
            size = LIMITS.batch_requests + 1
            requests = [pb.SearchRequest(query=pb.Query(text="a dog"), top_k=1)] * size
        else:
            cheap = [k for k in SEARCH_KINDS if k not in ("good", "text_huge", "text_random")]
            requests = [
                search_mutation(rng.choice(cheap), rng, t) for _ in range(rng.randint(0, 12))
            ]
        return FuzzRequest(
            kind, "BatchSearch", pb.BatchSearchRequest(requests=requests).SerializeToString()
        )
    if kind == "explain":
        request = pb.ExplainRequest(query=search_mutation(rng.choice(SEARCH_KINDS), rng, t).query)
        which = rng.randrange(3)
        if which == 0:
            request.row = rng.choice((rng.randrange(t.rows), rng.randint(-(2**63), 2**63 - 1)))
        elif which == 1:
            request.item_id = rng.choice(("", _unicode(rng, 8), "scene-0000001", "x" * 5000))
        return FuzzRequest(kind, "Explain", request.SerializeToString())
    if kind == "list_concepts":
        request = pb.ListConceptsRequest(
            page_size=_int32(rng),
            page_token=rng.choice(("", str(rng.randint(0, 2 * t.concepts)), _unicode(rng, 4))),
            name_contains=rng.choice(("", rng.choice(WORDS), _unicode(rng, 3))),
        )
        return FuzzRequest(kind, "ListConcepts", request.SerializeToString())
    if kind == "get_concept":
        request = pb.GetConceptRequest()
        if rng.random() < 0.8:
            request.concept.CopyFrom(_ref(rng, t))
        return FuzzRequest(kind, "GetConcept", request.SerializeToString())
    raise ValueError(f"unknown kind {kind!r}")


KINDS = (
    *SEARCH_KINDS, "oneof_clash", "raw_random", "raw_truncated", "raw_bitflip", "batch",
    "explain", "list_concepts", "get_concept",
)  # fmt: skip


def draw_requests(count: int, seed: int, t: Target) -> list[FuzzRequest]:
    """`count` requests, kinds in turn (every kind equally often), contents from `seed`."""
    rng = random.Random(seed)
    kinds = [KINDS[i % len(KINDS)] for i in range(count)]
    rng.shuffle(kinds)
    return [draw(kind, rng, t) for kind in kinds]


# --- running ------------------------------------------------------------------------------------


def _channel(target: str) -> grpc.Channel:
    limit = ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)
    return grpc.insecure_channel(
        target, options=[limit, ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
    )


def _good_hits(channel: grpc.Channel) -> tuple[list[str], int]:
    search = channel.unary_unary(
        SERVICE + "Search",
        request_serializer=pb.SearchRequest.SerializeToString,
        response_deserializer=pb.SearchResponse.FromString,
    )
    response = search(
        pb.SearchRequest(query=pb.Query(text=GOOD_QUERY), top_k=10), timeout=CALL_TIMEOUT_S
    )
    return [hit.id for hit in response.hits], response.bundle_version


def describe_target(channel: grpc.Channel) -> Target:
    info_call = channel.unary_unary(
        SERVICE + "GetIndexInfo",
        request_serializer=pb.GetIndexInfoRequest.SerializeToString,
        response_deserializer=pb.GetIndexInfoResponse.FromString,
    )
    info = info_call(pb.GetIndexInfoRequest(), timeout=CALL_TIMEOUT_S)
    return Target(info.dim, info.concepts, tuple(info.metadata_fields), info.rows)


def _health(channel: grpc.Channel) -> str:
    try:
        response = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=10
        )
    except grpc.RpcError as exc:
        return f"unreachable ({exc.code().name})"
    return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)


def _shorten(text: str, width: int = 160) -> str:
    text = re.sub(r"\s+", " ", text or "")
    return text if len(text) <= width else text[: width - 1] + "…"


def run_fuzz(
    target: str,
    requests: int = 10_000,
    seed: int = 0,
    max_seconds: float = 120.0,
    concurrency: int = 8,
) -> dict[str, Any]:
    """Fuzz the SearchService at `target`; a JSON-ready report (module docstring). `ok` is True
    when every answer had an expected status and the server answered the good query as before."""
    with _channel(target) as channel:
        t = describe_target(channel)
        before, version = _good_hits(channel)
        drawn = draw_requests(requests, seed, t)
        calls = {
            method: channel.unary_unary(SERVICE + method)  # bytes in, bytes out
            for method in ("Search", "BatchSearch", "Explain", "ListConcepts", "GetConcept")
        }
        counts: dict[str, Counter[str]] = defaultdict(Counter)
        examples: dict[str, str] = {}
        lock = threading.Lock()
        started = time.perf_counter()
        stop_at = started + max_seconds
        cursor = iter(range(len(drawn)))

        def worker() -> int:
            sent = 0
            while time.perf_counter() < stop_at:
                with lock:
                    index = next(cursor, None)
                if index is None:
                    return sent
                request = drawn[index]
                try:
                    calls[request.method](request.payload, timeout=CALL_TIMEOUT_S)
                    code, details = "OK", ""
                except grpc.RpcError as exc:
                    code, details = exc.code().name, exc.details() or ""
                sent += 1
                with lock:
                    counts[request.kind][code] += 1
                    examples.setdefault(f"{request.kind} {code}", _shorten(details))
            return sent

        with ThreadPoolExecutor(concurrency) as pool:
            sent = sum(pool.map(lambda _: worker(), range(concurrency)))
        seconds = time.perf_counter() - started
        health = _health(channel)
        try:
            after, version_after = _good_hits(channel)
        except grpc.RpcError as exc:
            after, version_after = [f"failed: {exc.code().name}"], -1
    codes: Counter[str] = Counter()
    for per_kind in counts.values():
        codes.update(per_kind)
    unexpected = {
        kind: {code: n for code, n in per_kind.items() if code not in EXPECTED_CODES}
        for kind, per_kind in counts.items()
        if set(per_kind) - EXPECTED_CODES
    }
    same = after == before and version_after == version
    return {
        "benchmark": "service_fuzz",
        "target": target,
        "seed": seed,
        "requested": requests,
        "sent": sent,
        "stopped_by_time": sent < requests,
        "seconds": round(seconds, 2),
        "requests_per_second": round(sent / seconds, 1) if seconds else None,
        "concurrency": concurrency,
        "codes": dict(sorted(codes.items())),
        "kinds": {kind: dict(sorted(counts[kind].items())) for kind in KINDS if kind in counts},
        "unexpected": unexpected,
        "examples": dict(sorted(examples.items())),
        "after": {"health": health, "good_query_same_hits": same},
        "ok": not unexpected and same and health == "SERVING",
    }


# --- the command: serve a bundle in a subprocess and fuzz it -------------------------------------


def start_server(bundles: Path, timeout: float = 300.0) -> tuple[subprocess.Popen[str], str]:
    """`strata serve --bundles DIR --port 0` in a subprocess; (process, host:port)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--bundles", str(bundles), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "STRATA_DEVICE": os.environ.get("STRATA_DEVICE", "cpu")},
    )
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    lines = []
    for line in process.stdout:
        lines.append(line)
        found = re.search(r" on (\S+:\d+); Ctrl-C stops", line)
        if found:
            threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
            return process, found.group(1)
        if time.monotonic() > deadline:
            break
    process.kill()
    raise RuntimeError("the server did not start:\n" + "".join(lines[-20:]))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument("--concurrency", type=int, default=8)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--target", help="host:port of a running server (else one is started)")
    where.add_argument("--bundles", type=Path, help="bundle directory to serve and fuzz")
    parser.add_argument("--rows", type=int, default=5000, help="synthetic gallery rows")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/service_fuzz.json"))
    args = parser.parse_args(argv)
    if args.target:
        result = run_fuzz(args.target, args.requests, args.seed, args.max_seconds, args.concurrency)
        return publish(result, args.json)
    with tempfile.TemporaryDirectory(prefix="strata-fuzz-") as folder:
        bundles = args.bundles
        if bundles is None:
            from service.benchmarks.load import build_gallery

            bundles = build_gallery(Path(folder), args.rows, 384)
        process, target = start_server(bundles)
        try:
            result = run_fuzz(target, args.requests, args.seed, args.max_seconds, args.concurrency)
            result["after"]["process_alive"] = process.poll() is None
            result["ok"] = result["ok"] and result["after"]["process_alive"]
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
    return publish(result, args.json)


if __name__ == "__main__":
    main()
