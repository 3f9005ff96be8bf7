"""The gRPC servicer of strata.v1.SearchService: thin — convert, delegate, map errors.

Search and BatchSearch go through the micro-batcher to `SearchEngine.search_batch` — a
BatchSearch as one request of many queries, worked through a few at a time between other
requests' queries (service/batching.py), so it never holds the queue, and dropped as soon as
its call ends (deadline, cancellation, the server's grace); Explain runs on the same single
engine thread (the encoder is used by one thread at a time); catalog and info calls read
immutable data on the event loop. Every request is held to service/limits.py first. Engine
errors become statuses, their messages cut by `errors.bounded` (and inputs quoted by
`errors.echo`):

    QueryError      INVALID_ARGUMENT     NotFoundError   NOT_FOUND
    OverloadedError RESOURCE_EXHAUSTED   DeadlineError   DEADLINE_EXCEEDED
    other ServiceError FAILED_PRECONDITION  anything else INTERNAL (logged with its traceback)

A query carries its call's deadline into the micro-batcher: one whose deadline passes while it
waits is dropped there, not computed. The engine is read from `self.engine` at every call, so
`StrataServer.swap_engine` replaces it for the calls that start afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import TypeVar

import grpc

from service import convert
from service._generated.strata.v1 import search_pb2 as pb
from service._generated.strata.v1 import search_pb2_grpc
from service.batching import ItemError, MicroBatcher
from service.errors import (
    DeadlineError,
    InternalError,
    NotFoundError,
    OverloadedError,
    QueryError,
    ServiceError,
    bounded,
)
from service.limits import LIMITS, RequestLimits, check_count
from service.metrics import ServerMetrics
from service.results import SearchQuery, SearchResult
from service.search import SearchEngine

log = logging.getLogger(__name__)
T = TypeVar("T")


def status_of(error: BaseException) -> grpc.StatusCode:
    """The gRPC status an engine error maps to."""
    if isinstance(error, QueryError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(error, NotFoundError):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(error, OverloadedError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(error, DeadlineError):
        return grpc.StatusCode.DEADLINE_EXCEEDED
    if isinstance(error, InternalError):
        return grpc.StatusCode.INTERNAL
    if isinstance(error, ServiceError):
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.INTERNAL


class SearchServicer(search_pb2_grpc.SearchServiceServicer):
    """SearchService over one engine, a batcher for Search, and the engine's executor."""

    def __init__(
        self,
        engine: SearchEngine,
        batcher: MicroBatcher[SearchQuery, SearchResult],
        executor: Executor,
        metrics: ServerMetrics | None = None,
        limits: RequestLimits = LIMITS,
    ) -> None:
        self.engine = engine
        self.batcher = batcher
        self.executor = executor
        self.metrics = metrics
        self.limits = limits

    async def _guarded(self, context: grpc.aio.ServicerContext, work: Awaitable[T]) -> T:
        try:
            return await work
        except ServiceError as exc:
            await context.abort(status_of(exc), bounded(str(exc)))
        except Exception as exc:
            log.exception("internal error")
            await context.abort(grpc.StatusCode.INTERNAL, bounded(f"internal error: {exc}"))
        raise AssertionError("unreachable: abort raises")

    async def _on_engine(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, call)

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
        async def work() -> pb.SearchResponse:
            started = time.perf_counter()
            query = convert.search_query(request, self.limits)
            result = await self.batcher.submit(query, deadline=loop_deadline(context))
            self._observe([result], started)
            return convert.search_response(result)

        return await self._guarded(context, work())

    async def BatchSearch(  # noqa: N802
        self, request: pb.BatchSearchRequest, context: grpc.aio.ServicerContext
    ) -> pb.BatchSearchResponse:
        async def work() -> pb.BatchSearchResponse:
            started = time.perf_counter()
            check_count("requests in one batch", len(request.requests), self.limits.batch_requests)
            deadline = loop_deadline(context)
            # converting 256 requests is tens of ms of Python: on a worker thread, so that the
            # event loop keeps serving other calls (the answers: on the engine thread, below)
            queries = await asyncio.to_thread(batch_queries, request, self.limits)
            try:
                results = await self.batcher.submit_many(
                    queries, deadline=deadline, finish=routed_response
                )  # each answer converted on the engine thread, chunk by chunk
            except ItemError as exc:
                error = exc.error
                if isinstance(error, ServiceError):
                    raise type(error)(f"request {exc.index}: {error}") from None
                raise error from None
            self._observe_routed([g for g, _ in results], started)
            return pb.BatchSearchResponse(responses=[response for _, response in results])

        return await self._guarded(context, work())

    async def Explain(  # noqa: N802
        self, request: pb.ExplainRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExplainResponse:
        async def work() -> pb.ExplainResponse:
            query = SearchQuery(**convert.query_fields(request.query))  # type: ignore[arg-type]
            which = request.WhichOneof("item")
            item_id = request.item_id if which == "item_id" else None
            row = request.row if which == "row" else None
            if which is None:
                raise QueryError("name the item: set item_id or row")
            explanation = await self._on_engine(lambda: self.engine.explain(query, item_id, row))
            return convert.explain_response(explanation)

        return await self._guarded(context, work())

    async def ListConcepts(  # noqa: N802
        self, request: pb.ListConceptsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListConceptsResponse:
        async def work() -> pb.ListConceptsResponse:
            page = self.engine.list_concepts(
                request.name_contains, request.page_size, request.page_token
            )
            return convert.concept_page_response(page)

        return await self._guarded(context, work())

    async def GetConcept(  # noqa: N802
        self, request: pb.GetConceptRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetConceptResponse:
        async def work() -> pb.GetConceptResponse:
            if not request.HasField("concept"):
                raise QueryError("name the concept: set its id, label or name")
            ref = convert.concept_ref_from_proto(request.concept)
            found = self.engine.get_concept(ref)
            return pb.GetConceptResponse(concepts=[convert.concept_to_proto(c) for c in found])

        return await self._guarded(context, work())

    async def GetIndexInfo(  # noqa: N802
        self, request: pb.GetIndexInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetIndexInfoResponse:
        async def work() -> pb.GetIndexInfoResponse:
            return convert.index_info_response(self.engine.info())

        return await self._guarded(context, work())


def batch_queries(request: pb.BatchSearchRequest, limits: RequestLimits) -> list[SearchQuery]:
    """The queries of a BatchSearch; a bad one is named by its index."""
    queries = []
    for i, message in enumerate(request.requests):
        try:
            queries.append(convert.search_query(message, limits))
        except QueryError as exc:
            raise QueryError(f"request {i}: {exc}") from None
    return queries


def routed_response(result: SearchResult) -> tuple[str, pb.SearchResponse]:
    """A result's granularity (for the metrics) and its response message."""
    return result.granularity.value, convert.search_response(result)


def loop_deadline(context: grpc.aio.ServicerContext) -> float | None:
    """The call's deadline in event-loop time; None when the client set none."""
    remaining = context.time_remaining()
    if remaining is None:
        return None
    return asyncio.get_running_loop().time() + remaining


class _Undecodable:
    """What a request that does not parse deserializes to (instead of raising in grpc)."""

    def __init__(self, message_type: str, error: Exception) -> None:
        self.message_type, self.error = message_type, error


class UndecodableRequestInterceptor(grpc.aio.ServerInterceptor):
    """Answers a request whose bytes are no valid message of its type with INVALID_ARGUMENT
    naming the fault (grpc itself would answer UNKNOWN, before any interceptor sees the call).

    Applies to methods with one request message (unary and server-streaming): the deserializer
    is made lenient, and the method refuses what it returns for bad bytes."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        deserialize = handler.request_deserializer
        owner = getattr(deserialize, "__self__", None)
        descriptor = getattr(owner, "DESCRIPTOR", None)
        message_type = getattr(descriptor, "full_name", "request message")

        def lenient(data: bytes) -> object:
            try:
                return deserialize(data)
            except Exception as exc:
                return _Undecodable(message_type, exc)

        def guarded(behavior: Callable[..., object]) -> Callable[..., object]:
            async def call(request: object, context: grpc.aio.ServicerContext) -> object:
                if isinstance(request, _Undecodable):
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        bounded(
                            f"the request is not a valid {request.message_type}: {request.error}"
                        ),
                    )
                result = behavior(request, context)
                return await result if asyncio.iscoroutine(result) else result

            return call

        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                guarded(handler.unary_unary),
                request_deserializer=lenient,
                response_serializer=handler.response_serializer,
            )
        return handler  # server-streaming: none in Strata's services; left as grpc has it
