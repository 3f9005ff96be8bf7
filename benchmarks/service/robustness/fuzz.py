"""A seeded fuzz of malformed requests against a live server: how each kind of bad input was
answered, and whether the server still answers a good query correctly afterwards.

Every request is one of the KINDS of benchmarks/service/robustness/fuzz_requests.py (mutated Search,
BatchSearch, Explain, ListConcepts and GetConcept requests, and raw bytes); raw bytes go
through a generic `channel.unary_unary` with identity serializers. Requests are drawn from
`random.Random(seed)` up front (the same seed, the same requests), then sent by `concurrency`
client threads until all are answered or `max_seconds` have passed.

A healthy server answers every one with OK, INVALID_ARGUMENT, NOT_FOUND or RESOURCE_EXHAUSTED;
anything else (INTERNAL, UNKNOWN, UNAVAILABLE, ...) is reported under `unexpected`. Afterwards
the good query must return the hits it returned before the fuzz, health must say SERVING, and
— when the fuzz started the server itself — the server process must still be running.

    python -m benchmarks.service.robustness.fuzz --requests 10000 --seed 0 --max-seconds 120
    python -m benchmarks.service.robustness.fuzz --target 127.0.0.1:50051  # a running server
    python -m benchmarks.service.robustness.fuzz --bundles runs/bundles  # serve it, fuzz it

`run_fuzz(target, requests, seed, max_seconds)` is the importable core (the soak script's).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from argparse import ArgumentParser
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from benchmarks.harness import benchmark_parser, publish
from benchmarks.service.robustness.fuzz_requests import KINDS, Target, draw_requests
from service._generated.strata.v1 import search_pb2 as pb
from service.api.grpc.requests import MAX_MESSAGE_BYTES

SERVICE = "/strata.v1.SearchService/"
EXPECTED_CODES = frozenset({"OK", "INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED"})
GOOD_QUERY = "a dog"
CALL_TIMEOUT_S = 60.0
# --- running ------------------------------------------------------------------------------------


def _channel(target: str) -> grpc.Channel:
    limit = ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)
    options = [limit, ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
    # a connection of its own: the callers spread over the workers of `strata serve --workers`
    return grpc.insecure_channel(target, options=[*options, ("grpc.use_local_subchannel_pool", 1)])


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
        counts: dict[str, Counter[str]] = defaultdict(Counter)
        examples: dict[str, str] = {}
        lock = threading.Lock()
        started = time.perf_counter()
        stop_at = started + max_seconds
        cursor = iter(range(len(drawn)))

        def worker() -> int:
            with _channel(target) as own:  # each caller its own connection
                return calling(own)

        def calling(own: grpc.Channel) -> int:
            calls = {
                method: own.unary_unary(SERVICE + method)  # bytes in, bytes out
                for method in ("Search", "BatchSearch", "Explain", "ListConcepts", "GetConcept")
            }
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


def start_server(
    bundles: Path,
    timeout: float = 300.0,
    http: bool = False,
    extra: Sequence[str] = (),
    root: Path | None = None,
) -> tuple[subprocess.Popen[str], str, str | None]:
    """`strata serve --bundles DIR --port 0` in a subprocess (with `--http-port 0` when `http`,
    then the `extra` arguments; the code of checkout `root` where given, else this one's);
    (process, gRPC host:port, HTTP host:port or None)."""
    command = [sys.executable, "-m", "service", "serve", "--bundles", str(bundles), "--port", "0"]
    env = {**os.environ, "STRATA_DEVICE": os.environ.get("STRATA_DEVICE", "cpu")}
    if root is not None:
        env["PYTHONPATH"] = str(root)
    process = subprocess.Popen(
        [*command, *(["--http-port", "0"] if http else []), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=root,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    target: str | None = None
    for line in process.stdout:
        lines.append(line)
        found = re.search(r" on (\S+:\d+);.*Ctrl-C stops", line)  # "; N workers" between
        target = found.group(1) if found else target
        found_http = re.search(r"^http: http://(\S+:\d+)/", line)
        if target is not None and (not http or found_http):
            threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
            return process, target, found_http.group(1) if found_http else None
        if time.monotonic() > deadline:
            break
    process.kill()
    raise RuntimeError("the server did not start:\n" + "".join(lines[-20:]))


@contextlib.contextmanager
def served_process(
    bundles: Path, http: bool = False
) -> Iterator[tuple[subprocess.Popen[str], str, str | None]]:
    """`start_server` for the length of the block, then terminated (killed after 30 s)."""
    process, target, http_target = start_server(bundles, http=http)
    try:
        yield process, target, http_target
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def fuzz_parser(doc: str | None, requests: int, target_help: str, json: Path) -> ArgumentParser:
    """The options of a fuzz of a live server: --requests, --seed, --max-seconds,
    --concurrency, --target or --bundles (else a synthetic gallery of --rows), --json."""
    parser = benchmark_parser(doc)
    parser.add_argument("--requests", type=int, default=requests)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument("--concurrency", type=int, default=8)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--target", help=target_help)
    where.add_argument("--bundles", type=Path, help="bundle directory to serve and fuzz")
    parser.add_argument("--rows", type=int, default=5000, help="synthetic gallery rows")
    parser.add_argument("--json", type=Path, default=json)
    return parser


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = fuzz_parser(
        __doc__,
        10_000,
        "host:port of a running server (else one is started)",
        Path("runs/bench/service_fuzz.json"),
    )
    args = parser.parse_args(argv)
    run = (args.requests, args.seed, args.max_seconds, args.concurrency)
    if args.target:
        return publish(run_fuzz(args.target, *run), args.json)
    with tempfile.TemporaryDirectory(prefix="strata-fuzz-") as folder:
        bundles = args.bundles
        if bundles is None:
            from benchmarks.service.load import build_gallery

            bundles = build_gallery(Path(folder), args.rows, 384)
        with served_process(bundles) as (process, target, _):
            result = run_fuzz(target, *run)
            result["after"]["process_alive"] = process.poll() is None
            result["ok"] = result["ok"] and result["after"]["process_alive"]
    return publish(result, args.json)


if __name__ == "__main__":
    main()
