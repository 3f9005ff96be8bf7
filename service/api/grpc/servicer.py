"""The gRPC servicer of strata.v1.SearchService: thin — convert, delegate.

Search and BatchSearch go through the micro-batcher to `SearchEngine.search_batch` — a
BatchSearch as one request of many queries, worked through a few at a time between other
requests' queries (service/serving/batching.py), so it never holds the queue, and dropped as soon as
its call ends (deadline, cancellation, the server's grace); Explain too, as a request of its
own, run alone in one of the engine's lanes (threads), in its turn among the searches;
catalog and info calls read immutable data on the event loop. Every request is held to
service/limits.py first. The methods raise the engine's errors;
`service.api.grpc.rpc_errors.ErrorStatusInterceptor` turns them into statuses (one mapping for
every service).

A query carries its call's deadline into the micro-batcher: one whose deadline passes while it
waits is dropped there, not computed. Search, BatchSearch and Explain each lease the engine
from the `ServedEngine` when they start and are answered by that version to the end (every
query of a batch is pinned to it, service/serving/served_engine.py), so `StrataServer.swap_engine`
replaces it for the calls that start afterwards; each response's `bundle_version` names it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Executor

import grpc

from service._generated.strata.v1 import search_pb2 as pb
from service._generated.strata.v1 import search_pb2_grpc
from service.api.grpc import requests, responses
from service.errors import QueryError, ServiceError
from service.limits import LIMITS, RequestLimits, check_count
from service.results import SearchQuery, SearchResult
from service.serving.batching import ItemError, MicroBatcher
from service.serving.metrics import ServerMetrics
from service.serving.served_engine import PinnedQuery, ServedEngine


class SearchServicer(search_pb2_grpc.SearchServiceServicer):
    """SearchService over the served engine, a batcher for Search, and the engine's executor."""

    def __init__(
        self,
        served: ServedEngine,
        batcher: MicroBatcher[PinnedQuery, SearchResult],
        executor: Executor,
        metrics: ServerMetrics | None = None,
        limits: RequestLimits = LIMITS,
    ) -> None:
        self.served = served
        self.batcher = batcher
        self.executor = executor
        self.metrics = metrics
        self.limits = limits

    def _deadline(self, context: grpc.aio.ServicerContext) -> float | None:
        """The call's deadline by the batcher's clock; None when the client set none."""
        return call_deadline(context, self.batcher.clock)

    def _observe(self, results: list[SearchResult], started: float) -> None:
        self._observe_routed([r.granularity.value for r in results], started)

    def _observe_routed(self, granularities: list[str], started: float) -> None:
        if self.metrics is not None:
            seconds = time.perf_counter() - started
            for granularity in granularities:
                self.metrics.observe_search(granularity, seconds)

    async def Search(  # noqa: N802 (gRPC method names)
        self, request: pb.SearchRequest, context: grpc.aio.ServicerContext
    ) -> pb.SearchResponse:
        started = time.perf_counter()
        query = requests.search_query(request, self.limits)
        with self.served.lease() as engine:
            pinned = PinnedQuery(engine, query)
            result = await self.batcher.submit(pinned, deadline=self._deadline(context))
        self._observe([result], started)
        return responses.search_response(result)

    async def BatchSearch(  # noqa: N802
        self, request: pb.BatchSearchRequest, context: grpc.aio.ServicerContext
    ) -> pb.BatchSearchResponse:
        started = time.perf_counter()
        check_count("requests in one batch", len(request.requests), self.limits.batch_requests)
        deadline = self._deadline(context)
        # converting 256 requests is tens of ms of Python: on a worker thread, so that the
        # event loop keeps serving other calls (the answers: on the engine thread, below)
        queries = await asyncio.to_thread(batch_queries, request, self.limits)
        with self.served.lease() as engine:  # one version for every chunk of the batch
            try:
                results = await self.batcher.submit_many(
                    [PinnedQuery(engine, q) for q in queries],
                    deadline=deadline,
                    finish=routed_response,
                )  # each answer converted on the engine thread, chunk by chunk
            except ItemError as exc:
                error = exc.error
                if isinstance(error, ServiceError):
                    raise type(error)(f"request {exc.index}: {error}") from None
                raise error from None
        self._observe_routed([g for g, _ in results], started)
        return pb.BatchSearchResponse(
            responses=[response for _, response in results],
            bundle_version=engine.bundle.version,
        )

    async def Explain(  # noqa: N802
        self, request: pb.ExplainRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExplainResponse:
        query = SearchQuery(**requests.query_fields(request.query))  # type: ignore[arg-type]
        which = request.WhichOneof("item")
        item_id = request.item_id if which == "item_id" else None
        row = request.row if which == "row" else None
        if which is None:
            raise QueryError("name the item: set item_id or row")
        with self.served.lease() as engine:  # in its turn among the searches (batching.py)
            explanation = await self.batcher.submit_call(
                lambda: engine.explain(query, item_id, row, self.metrics, request.near_captions),
                deadline=self._deadline(context),
            )
        return responses.explain_response(explanation)

    async def ListConcepts(  # noqa: N802
        self, request: pb.ListConceptsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListConceptsResponse:
        page = self.served.engine.list_concepts(
            request.name_contains,
            request.page_size,
            request.page_token,
            request.include_below_floor,
        )
        return responses.concept_page_response(page)

    async def GetConcept(  # noqa: N802
        self, request: pb.GetConceptRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetConceptResponse:
        if not request.HasField("concept"):
            raise QueryError("name the concept: set its id, label or name")
        ref = requests.concept_ref_from_proto(request.concept)
        found = self.served.engine.get_concept(ref)
        return pb.GetConceptResponse(concepts=[responses.concept_to_proto(c) for c in found])

    async def GetIndexInfo(  # noqa: N802
        self, request: pb.GetIndexInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetIndexInfoResponse:
        return responses.index_info_response(self.served.engine.info())


def batch_queries(request: pb.BatchSearchRequest, limits: RequestLimits) -> list[SearchQuery]:
    """The queries of a BatchSearch; a bad one is named by its index."""
    queries = []
    for i, message in enumerate(request.requests):
        try:
            queries.append(requests.search_query(message, limits))
        except QueryError as exc:
            raise QueryError(f"request {i}: {exc}") from None
    return queries


def routed_response(result: SearchResult) -> tuple[str, pb.SearchResponse]:
    """A result's granularity (for the metrics) and its response message."""
    return result.granularity.value, responses.search_response(result)


def call_deadline(context: grpc.aio.ServicerContext, clock: Callable[[], float]) -> float | None:
    """The call's deadline in `clock`'s time (seconds); None when the client set none."""
    remaining = context.time_remaining()
    if remaining is None:
        return None
    return clock() + remaining
