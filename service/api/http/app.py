"""The HTTP/JSON API and the page: strata.v1.SearchService over the proto's JSON mapping.

    POST /v1/search            SearchRequest       → SearchResponse
    POST /v1/batch-search      BatchSearchRequest  → BatchSearchResponse
    POST /v1/explain           ExplainRequest      → ExplainResponse
    GET  /v1/concepts          ListConceptsRequest (query parameters; or POST a body)
    POST /v1/concepts:get      GetConceptRequest   → GetConceptResponse
    GET  /v1/index-info        GetIndexInfoResponse (POST too)
    GET  /healthz              {"status": "SERVING"} 200, or "NOT_SERVING" 503
    GET  /openapi.json         the OpenAPI 3.1 description (service/api/http/openapi.py)
    GET  /thumbnails/{row}     a JPEG of the row's image, from the bundle's image root only
    GET  /                     the page (service/web/static/: plain files, no build step)

Every method runs on the gRPC servicer itself (`SearchServicer`, in-process: the same limits,
micro-batcher, engine thread and hot-swapped engine, no gRPC loopback). Bodies and answers are
`google.protobuf.json_format`'s canonical mapping: lowerCamelCase names out (either spelling
in), int64 as strings, enums by name, bytes as base64, unknown fields refused; every field is
written, defaults included. A body that is no such JSON is INVALID_ARGUMENT, one over
`body_bytes` (twice the gRPC message limit: JSON and base64 are wordier) is refused unread
(413) and a parsed message over the gRPC limit is RESOURCE_EXHAUSTED, as gRPC refuses it.
`Strata-Timeout: S` (seconds) is the call's deadline, as a gRPC deadline is, and a client that
disconnects cancels its call, as a gRPC client's cancellation does (`unless_disconnected`).

Errors: the status `service.api.grpc.rpc_errors.status_of` gives (the one error → status mapping)
as an HTTP status (`HTTP_STATUS`, the mapping of Google's HTTP APIs), with the same message:
`{"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "…"}}`. Metrics: the series
of `service.api.grpc.rpc_metrics.observed_call`, labelled grpc_type="http" with the RPC's service,
method and status code; each call is counted in the server's `CallOverlap` as a gRPC call is
(service/serving/thread_placement.py). AdminService is not exposed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from service._generated.strata.v1 import search_pb2 as pb
from service.api.grpc.rpc_errors import status_of
from service.api.grpc.rpc_metrics import observed_call
from service.api.grpc.servicer import SearchServicer
from service.api.http.messages import (
    BodyTooLargeError,
    HttpCallContext,
    error_response,
    parse_message,
    query_message,
    read_body,
    render,
    timeout_of,
    unless_disconnected,
)
from service.api.http.openapi import Operation, openapi_document
from service.engine.thumbnails import BundleImages
from service.errors import (
    NotFoundError,
    ServiceError,
    bounded,
    echo,
)
from service.limits import MAX_REQUEST_BYTES
from service.serving.metrics import ServerMetrics
from service.serving.thread_placement import CallOverlap

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SearchService"].full_name
HEALTH_SERVICE = "grpc.health.v1.Health"
HTTP_TYPE = "http"  # the grpc_type label of calls made over the HTTP API
STATIC_DIR = Path(__file__).resolve().parents[2] / "web" / "static"
OFF_LOOP_BYTES = 64 * 1024  # answers larger than this are written out on a worker thread

_MESSAGES = pb.DESCRIPTOR.message_types_by_name
OPERATIONS: tuple[Operation, ...] = tuple(
    Operation(rpc, path, verbs, _MESSAGES[request], _MESSAGES[response], summary)
    for rpc, path, verbs, request, response, summary in (
        ("Search", "/v1/search", ("post",), "SearchRequest", "SearchResponse",
         "One query at a granularity, with concept and metadata filters, explained on request"),
        ("BatchSearch", "/v1/batch-search", ("post",), "BatchSearchRequest",
         "BatchSearchResponse", "Several queries in one call, answers in order"),
        ("Explain", "/v1/explain", ("post",), "ExplainRequest", "ExplainResponse",
         "Why an item matches a query: shared concepts and the cosine at every prefix"),
        ("ListConcepts", "/v1/concepts", ("get", "post"), "ListConceptsRequest",
         "ListConceptsResponse", "The concept catalog, paged, optionally by a name substring"),
        ("GetConcept", "/v1/concepts:get", ("post",), "GetConceptRequest",
         "GetConceptResponse", "A concept by id, label or name, with its top examples"),
        ("GetIndexInfo", "/v1/index-info", ("get", "post"), "GetIndexInfoRequest",
         "GetIndexInfoResponse", "What the server serves: bundle, contract, metadata schema"),
    )
)  # fmt: skip
_CLASSES = {name: getattr(pb, name) for name in _MESSAGES}  # message name → generated class


@dataclass(frozen=True)
class HttpConfig:
    """What the HTTP API accepts; the page's image root (None: the bundle's own)."""

    body_bytes: int = 2 * MAX_REQUEST_BYTES
    max_message_bytes: int = MAX_REQUEST_BYTES
    image_root: Path | None = None


class HttpApi:
    """The Starlette app of one server: the API over its servicer, health, the page."""

    def __init__(
        self,
        servicer: SearchServicer,
        metrics: ServerMetrics,
        serving: Callable[[], bool],
        config: HttpConfig | None = None,
        overlap: CallOverlap | None = None,
    ) -> None:
        self.servicer = servicer
        self.metrics = metrics
        self.serving = serving
        self.config = config or HttpConfig()
        self.overlap = overlap or CallOverlap()  # the API's calls counted as gRPC's are
        self._images: BundleImages | None = None
        self._openapi: bytes | None = None
        metrics.preset_methods(SERVICE_NAME, [(op.rpc, HTTP_TYPE) for op in OPERATIONS])
        metrics.preset_methods(HEALTH_SERVICE, [("Check", HTTP_TYPE)])

    def app(self) -> Starlette:
        routes = [
            Route(op.path, self._endpoint(op), methods=[v.upper() for v in op.verbs])
            for op in OPERATIONS
        ]
        routes += [
            Route("/healthz", self.health, methods=["GET"]),
            Route("/openapi.json", self.openapi, methods=["GET"]),
            Route("/thumbnails/{row:int}", self.thumbnail, methods=["GET"]),
            Route("/", self.page, methods=["GET"]),
            Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
        ]
        return Starlette(routes=routes, exception_handlers={HTTPException: _http_error})

    # --- the API ---

    def _endpoint(self, op: Operation) -> Callable[[Request], Any]:
        message_class = _CLASSES[op.request.name]

        async def endpoint(request: Request) -> Response:
            return await self._call(op, message_class, request)

        return endpoint

    async def _call(
        self, op: Operation, message_class: type[Message], request: Request
    ) -> Response:
        labels = (HTTP_TYPE, SERVICE_NAME, op.rpc)
        context = HttpCallContext()
        self.overlap.begin()
        try:
            with observed_call(self.metrics, labels, context):
                try:
                    context.set_timeout(timeout_of(request))
                    message = await self._request_message(message_class, request)
                    call = getattr(self.servicer, op.rpc)(message, context)
                    response = await unless_disconnected(call, request)
                except ClientDisconnect:
                    context.set_code(grpc.StatusCode.CANCELLED)
                    raise
                except Exception as exc:
                    context.set_code(status_of(exc))
                    raise
        except ClientDisconnect:
            return Response(status_code=499)
        except Exception as exc:
            if not isinstance(exc, ServiceError):
                log.exception("HTTP %s: internal error", op.rpc)
            return error_response(exc)
        finally:
            self.overlap.end()
        if response.ByteSize() > OFF_LOOP_BYTES:
            content = await asyncio.to_thread(render, response)
        else:
            content = render(response)
        return Response(content, media_type="application/json")

    async def _request_message(self, message_class: type[Message], request: Request) -> Message:
        if request.method == "GET":
            return query_message(dict(request.query_params), message_class)
        body = await read_body(request, self.config.body_bytes)
        message = parse_message(body, message_class)
        size = message.ByteSize()
        if size > self.config.max_message_bytes:
            raise BodyTooLargeError(
                f"a request message of {size} bytes; at most {self.config.max_message_bytes}"
            )
        return message

    async def health(self, request: Request) -> Response:
        context = HttpCallContext()
        with observed_call(self.metrics, (HTTP_TYPE, HEALTH_SERVICE, "Check"), context):
            serving = self.serving()
        status = "SERVING" if serving else "NOT_SERVING"
        return JSONResponse({"status": status}, status_code=200 if serving else 503)

    async def openapi(self, request: Request) -> Response:
        if self._openapi is None:
            document = api_document()
            self._openapi = json.dumps(document, indent=1).encode()
        return Response(self._openapi, media_type="application/json")

    # --- the page ---

    async def page(self, request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    def images(self) -> BundleImages:
        """The served bundle's images (rebuilt when a hot swap changed the bundle)."""
        bundle = self.servicer.served.engine.bundle
        images = self._images
        if images is None or images.bundle is not bundle:
            images = BundleImages(bundle, self.config.image_root)
            self._images = images
        return images

    async def thumbnail(self, request: Request) -> Response:
        row = int(request.path_params["row"])
        try:
            wanted = request.query_params.get("version")
            images = await asyncio.to_thread(self.images)
            if wanted is not None and wanted != str(images.bundle.version):
                raise NotFoundError(f"version {echo(wanted)} is not the one served")
            data = await asyncio.to_thread(images.thumbnail, row)
        except ServiceError as exc:
            return error_response(exc)
        return Response(data, media_type="image/jpeg", headers={"cache-control": "max-age=600"})


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, a verb a route does not take) as JSON."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    name = {404: "NOT_FOUND", 405: "UNIMPLEMENTED"}.get(status, "INVALID_ARGUMENT")
    detail = exc.detail if isinstance(exc, HTTPException) else "error"
    body = {"error": {"code": status, "status": name, "message": bounded(str(detail))}}
    return JSONResponse(body, status_code=status)


_EXTRA_PATHS: dict[str, Any] = {
    "/healthz": {
        "get": {
            "operationId": "Health",
            "summary": "SERVING (200) or NOT_SERVING (503), as grpc.health.v1 reports it",
            "responses": {"200": {"description": "serving"}, "503": {"description": "not"}},
        }
    },
    "/thumbnails/{row}": {
        "get": {
            "operationId": "Thumbnail",
            "summary": "A JPEG thumbnail of a row's image, from the bundle's image root",
            "parameters": [
                {"name": "row", "in": "path", "required": True, "schema": {"type": "integer"}},
                {"name": "version", "in": "query", "schema": {"type": "integer"}},
            ],
            "responses": {
                "200": {"content": {"image/jpeg": {}}},
                "404": {"description": "no such row, no image, or not under the image root"},
            },
        }
    },
}


def api_document() -> dict[str, Any]:
    """The OpenAPI document the server answers at /openapi.json (the docs site's reference too)."""
    return openapi_document(OPERATIONS, "Strata HTTP API", "v1", _EXTRA_PATHS)
