"""A seeded fuzz of malformed requests against a live server: how each kind of bad input was
answered, and whether the server still answers a good query correctly afterwards.

Every request is one of the KINDS of tests/robustness/fuzz_requests.py (mutated Search,
BatchSearch, Explain, ListConcepts and GetConcept requests, and raw bytes); raw bytes go
through a generic `channel.unary_unary` with identity serializers. Requests are drawn from
`random.Random(seed)` up front (the same seed, the same requests), then sent by `concurrency`
client threads until all are answered or `max_seconds` have passed.

A healthy server answers every one with OK, INVALID_ARGUMENT, NOT_FOUND or RESOURCE_EXHAUSTED;
anything else (INTERNAL, UNKNOWN, UNAVAILABLE, ...) is reported under `unexpected`. Afterwards
the good query must return the hits it returned before the fuzz, and health must say SERVING.
`run_fuzz(target, requests, seed, max_seconds)` is used by the API and worker-pool tests and by
the soak benchmark's fuzz phase.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service._generated.strata.v1 import search_pb2 as pb
from service.api.grpc.requests import MAX_MESSAGE_BYTES
from tests.robustness.fuzz_requests import KINDS, Target, draw_requests

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
