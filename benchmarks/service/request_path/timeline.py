"""The timeline part of benchmarks/service/request_path: where one served call's time goes, read
off a live server rather than each stage timed alone.

A `StrataServer` runs in this process (`BackgroundServer`: its own event loop, its own lanes, as
`strata serve` runs them) over the benchmark's bundle, its engine sharing the in-process
engine's scorer (the same indexes and plans); that engine stamps when `search_batch`
starts and ends, and its servicer when `Search` starts and returns. One client calls it, one
call at a time, and after each served call the same query is computed by `search_batch` on the
main thread (`harness.interleaved_times`: paired, as the latency part pairs its arms). Per
kind (object: a raw vector, run on the event loop; full: a funnel, run in a lane), the median
ms of

    client → handler     the request's way in: the client's send, gRPC, the handler's start
    handler → engine     conversion, checks, the batcher, and for a lane query its thread's wake
    engine               search_batch inside the server
    engine → handler end the result back to the event loop (a lane query: the loop's wake),
                         hits, the response message, the metrics
    handler → client     the response's way out

and the paired difference engine − in-process (the same computation, in the server or not).
The client shares this process with the server (the GIL included), so the sum is not the
latency part's served figure; each stage's share is the point.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import grpc
import numpy as np

from benchmarks.harness import interleaved_times
from benchmarks.service.request_path import K, vector_request
from service._generated.strata.v1 import search_pb2 as pb
from service._generated.strata.v1 import search_pb2_grpc
from service.api.background import BackgroundServer
from service.api.grpc.requests import granularity_to_proto
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.results import SearchQuery

STAGES = (
    "client → handler",
    "handler → engine",
    "engine",
    "engine → handler end",
    "handler → client",
    "engine − in-process (paired)",
)


class StampedEngine(SearchEngine):
    """A SearchEngine that keeps when its last `search_batch` started and ended (one call in
    flight at a time: the timeline's client waits for each)."""

    stamps: dict[str, float]

    def search_batch(self, queries: Sequence[SearchQuery], observer: Any = None) -> Any:
        self.stamps["engine"] = time.perf_counter()
        try:
            return super().search_batch(queries, observer)
        finally:
            self.stamps["engine end"] = time.perf_counter()


def timeline_part(engine: SearchEngine, vectors: np.ndarray, rounds: int) -> dict[str, Any]:
    """Median ms of each stage (module doc) for object and full vector queries."""
    stamps: dict[str, float] = {}
    scorer = engine.scorer  # the same scorer, its vocabulary already bound

    stamped = StampedEngine(engine.bundle, None, engine.config, engine.cache, lambda _: scorer)
    stamped.stamps = stamps
    background = BackgroundServer(stamped, ServerConfig(port=0))
    servicer = background.server.servicer
    search = servicer.Search

    async def timed_search(request: pb.SearchRequest, context: Any) -> pb.SearchResponse:
        stamps["handler"] = time.perf_counter()
        try:
            return await search(request, context)
        finally:
            stamps["handler end"] = time.perf_counter()

    servicer.Search = timed_search  # type: ignore[method-assign]  # read when the server starts
    with background, grpc.insecure_channel(background.target) as channel:
        stub = search_pb2_grpc.SearchServiceStub(channel)
        return {
            kind: kind_timeline(stub, engine, stamps, kind, vectors, rounds)
            for kind in ("object", "full")
        }


def kind_timeline(
    stub: Any,
    engine: SearchEngine,
    stamps: dict[str, float],
    kind: str,
    vectors: np.ndarray,
    rounds: int,
) -> dict[str, float]:
    """Median ms of each stage for vector queries at granularity `kind`, each served call (its
    stamps in `stamps`) paired with the same search in-process."""
    code = granularity_to_proto(kind)
    requests = [vector_request(v, code) for v in vectors]
    queries = [SearchQuery.of(vector=v, granularity=kind, k=K) for v in vectors]
    for request in requests[:20]:  # warm: the lanes, the plan, the caches
        stub.Search(request, timeout=60)
    spans: list[list[float]] = []  # each served call's, in turn (the harness's warm call first)

    def served(i: int) -> None:
        stamps.clear()
        began = time.perf_counter()
        stub.Search(requests[i], timeout=60)
        marks = [began, stamps["handler"], stamps["engine"], stamps["engine end"]]
        marks += [stamps["handler end"], time.perf_counter()]
        spans.append([b - a for a, b in pairwise(marks)])

    arms = {"served": served, "in-process": lambda i: engine.search_batch([queries[i]])}
    alone = interleaved_times(arms, len(vectors), rounds)["in-process"]
    rows = [[*span, span[2] - t] for span, t in zip(spans[1:], alone, strict=True)]
    medians = [1000 * statistics.median(column) for column in zip(*rows, strict=True)]
    return dict(zip(STAGES, medians, strict=True))
