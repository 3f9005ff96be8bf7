"""The profile part of benchmarks/service/request_path: µs per stage of one served query
(decode, conversion, checks, routing, embedding, rotation, FAISS, hits, result, response,
metrics), each stage timed alone and hot, and the batcher: a lone cheap query through an idle
MicroBatcher, run on its event loop (what these queries pay), and the round trip through a
lane's thread a dearer query pays. That module's docstring says how to read them.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from service._generated.strata.v1 import search_pb2 as pb
from service.api.grpc import requests, responses
from service.engine.hits import hits_of
from service.engine.search import SearchEngine
from service.query.checks import check_query
from service.serving.batching import MicroBatcher
from service.serving.metrics import ServerMetrics

# the served path's stages outside SearchEngine.search; the rest of a served query's time
# beyond the in-process search is gRPC's
ON_LOOP = "batcher (on the loop)"
IN_A_LANE = "batcher hand-off to a lane (a dearer query's)"
AROUND = ("decode", "conversion", "response", "metrics", ON_LOOP)


def median_us(call: Callable[[], object], calls: int) -> float:
    times = []
    call()
    for _ in range(calls):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return 1e6 * statistics.median(times)


def batcher_us(calls: int, on_loop: bool) -> float:
    """Submit to result through an idle MicroBatcher whose batch function does nothing.
    `on_loop`: every item is cheap, so a lone one runs on the event loop, as a served raw
    vector or cached text does; else the event loop → lane thread → event loop round trip a
    lone dearer query makes."""
    executor = ThreadPoolExecutor(max_workers=1)
    batcher: MicroBatcher[int, int] = MicroBatcher(
        lambda items: items, executor=executor, cheap=(lambda _: True) if on_loop else None
    )

    async def run() -> float:
        times = []
        await batcher.submit(0)
        for i in range(calls):
            started = time.perf_counter()
            await batcher.submit(i)
            times.append(time.perf_counter() - started)
        await batcher.close()
        return 1e6 * statistics.median(times)

    try:
        return asyncio.run(run())
    finally:
        executor.shutdown()


def stage_profile(
    engine: SearchEngine, request: pb.SearchRequest, calls: int, batcher: dict[str, float]
) -> dict[str, float]:
    """Part 3 for one request: µs per stage of the server's path (the package's docstring)."""
    data = request.SerializeToString()
    query = requests.search_query(request)
    limits = engine.config.limits
    stages: dict[str, Callable[[], object]] = {
        "decode": lambda: pb.SearchRequest.FromString(data),
        "conversion": lambda: requests.search_query(request),
        "checks": lambda: check_query(
            query, limits, engine.metadata_fields, engine.bundle.dim, engine.encoder
        ),
        "routing": lambda: engine.route(query),
    }
    prepared = engine._prepare(query)
    assert prepared.error is None, prepared.error
    stages["checks + routing + plan (prepare)"] = lambda: engine._prepare(query)
    stages["embedding"] = lambda: engine._embed([prepared], None)
    engine._embed([prepared], None)
    embedding = prepared.embedding[None, :]  # type: ignore[index]
    stages["rotation"] = lambda: engine.bundle.rotate(embedding)
    rotated = engine.bundle.rotate(embedding)
    length = prepared.length
    stages["search (FAISS)"] = lambda: engine.bundle.search_prefix(length, rotated, query.k)
    scores, rows = engine.bundle.search_prefix(length, rotated, query.k)
    stages["hits"] = lambda: hits_of(engine.bundle, scores[0], rows[0], [], engine.image_root)
    stages["result"] = lambda: engine.scorer.result(prepared, scores[0], rows[0], None)
    result = engine.scorer.result(prepared, scores[0], rows[0], None)
    stages["response"] = lambda: responses.search_response(result).SerializeToString()
    metrics = ServerMetrics()
    labels = ("unary", "strata.v1.SearchService", "Search")

    def record() -> None:
        metrics.started.labels(*labels).inc()
        metrics.handled.labels(*labels, "OK").inc()
        metrics.handling.labels(*labels).observe(0.001)
        metrics.observe_search("object", 0.001)

    stages["metrics"] = record
    out = {name: median_us(call, calls) for name, call in stages.items()}
    out.update(batcher)
    out["in-process search (whole)"] = median_us(lambda: engine.search(query), calls)
    return out
