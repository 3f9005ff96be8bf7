"""The gRPC servicer of strata.v1.SearchService: thin — convert, delegate, map errors.

Searches go through the micro-batcher to `SearchEngine.search_batch`; BatchSearch and Explain
run on the same single engine thread (the encoder is used by one thread at a time); catalog
and info calls read immutable data on the event loop. Engine errors become statuses:

    QueryError      INVALID_ARGUMENT     NotFoundError   NOT_FOUND
    OverloadedError RESOURCE_EXHAUSTED   anything else   INTERNAL (logged with its traceback)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import TypeVar

import grpc

from service import convert
from service._generated.strata.v1 import search_pb2 as pb
from service._generated.strata.v1 import search_pb2_grpc
from service.batching import MicroBatcher
from service.errors import NotFoundError, OverloadedError, QueryError, ServiceError
from service.results import SearchQuery, SearchResult
from service.search import SearchEngine

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_BATCH_REQUESTS = 1024


def status_of(error: BaseException) -> grpc.StatusCode:
    """The gRPC status an engine error maps to."""
    if isinstance(error, QueryError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(error, NotFoundError):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(error, OverloadedError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
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
    ) -> None:
        self.engine = engine
        self.batcher = batcher
        self.executor = executor

    async def _guarded(self, context: grpc.aio.ServicerContext, work: Awaitable[T]) -> T:
        try:
            return await work
        except ServiceError as exc:
            await context.abort(status_of(exc), str(exc))
        except Exception as exc:
            log.exception("internal error")
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {exc}")
        raise AssertionError("unreachable: abort raises")

    async def _on_engine(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, call)

    async def Search(  # noqa: N802 (gRPC method names)
        self, request: pb.SearchRequest, context: grpc.aio.ServicerContext
    ) -> pb.SearchResponse:
        async def work() -> pb.SearchResponse:
            result = await self.batcher.submit(convert.search_query(request))
            return convert.search_response(result)

        return await self._guarded(context, work())

    async def BatchSearch(  # noqa: N802
        self, request: pb.BatchSearchRequest, context: grpc.aio.ServicerContext
    ) -> pb.BatchSearchResponse:
        async def work() -> pb.BatchSearchResponse:
            if len(request.requests) > MAX_BATCH_REQUESTS:
                raise QueryError(
                    f"{len(request.requests)} requests in one batch; at most {MAX_BATCH_REQUESTS}"
                )
            queries = []
            for i, message in enumerate(request.requests):
                try:
                    queries.append(convert.search_query(message))
                except QueryError as exc:
                    raise QueryError(f"request {i}: {exc}") from None
            results = await self._on_engine(lambda: self.engine.search_batch(queries))
            for i, result in enumerate(results):
                if isinstance(result, ServiceError):
                    raise type(result)(f"request {i}: {result}")
            return pb.BatchSearchResponse(
                responses=[convert.search_response(r) for r in results]  # type: ignore[arg-type]
            )

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
