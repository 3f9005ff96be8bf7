"""The gRPC series of `ServerMetrics`, recorded by a server interceptor.

    grpc_server_started_total{grpc_type,grpc_service,grpc_method}            counter
    grpc_server_handled_total{grpc_type,grpc_service,grpc_method,grpc_code}  counter
    grpc_server_handling_seconds{grpc_type,grpc_service,grpc_method}         histogram

`MetricsInterceptor` sees every call of every service registered on the server, errors raised
by `context.abort` included (it is the outermost interceptor), and names the status a call
ended with as grpc-go's exporters do.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc

from service.api.grpc.rpc_handlers import (
    Behavior,
    HandlerInterceptor,
    rewrapped,
    run_behavior,
    split_method,
)
from service.serving.metrics import ServerMetrics

Labels = tuple[str, str, str]


def grpc_type(handler: grpc.RpcMethodHandler) -> str:
    if handler.request_streaming and handler.response_streaming:
        return "bidi_stream"
    if handler.request_streaming:
        return "client_stream"
    if handler.response_streaming:
        return "server_stream"
    return "unary"


def code_name(context: grpc.aio.ServicerContext, error: BaseException | None) -> str:
    """The status a finished call ended with, as grpc-go's exporters name it."""
    code = context.code()
    if code is not None and code != grpc.StatusCode.OK:
        if isinstance(code, grpc.StatusCode):
            return code.name
        for candidate in grpc.StatusCode:  # the aio context may hand back the raw int
            if candidate.value[0] == code:
                return candidate.name
    if error is None:
        return "OK"
    if isinstance(error, BaseException) and type(error).__name__ == "CancelledError":
        remaining = context.time_remaining()
        return "DEADLINE_EXCEEDED" if remaining is not None and remaining <= 0 else "CANCELLED"
    return "UNKNOWN"


@contextlib.contextmanager
def observed_call(metrics: ServerMetrics, labels: Labels, context: Any) -> Iterator[None]:
    """Count a call as started; at its end, as handled with its status (`code_name`), and
    time it. `context`: the call's grpc.aio context, or anything with its `code()` and
    `time_remaining()` (the HTTP API's call context, service/api/http/app.py)."""
    series = metrics.rpc_series(labels)
    series.started.inc()
    started = time.perf_counter()
    error: BaseException | None = None
    try:
        yield
    except BaseException as exc:
        error = exc
        raise
    finally:
        series.handled(code_name(context, error)).inc()
        series.handling.observe(time.perf_counter() - started)


class MetricsInterceptor(HandlerInterceptor):
    """Counts and times every RPC of every service registered on the server."""

    def __init__(self, metrics: ServerMetrics) -> None:
        super().__init__()
        self.metrics = metrics

    def intercept(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        labels = (grpc_type(handler), *split_method(method))
        return rewrapped(handler, lambda behavior: self._wrap(behavior, labels))

    def _wrap(self, behavior: Behavior, labels: Labels) -> Behavior:
        if inspect.isgeneratorfunction(behavior):  # a plain generator: iterate it here
            sync_behavior = behavior

            async def from_sync(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator:
                for response in sync_behavior(request, context):
                    yield response

            behavior = from_sync
        if inspect.isasyncgenfunction(behavior):

            async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator:
                with observed_call(self.metrics, labels, context):
                    async for response in behavior(request, context):
                        yield response

            return streaming

        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            with observed_call(self.metrics, labels, context):
                return await run_behavior(behavior, request, context)

        return call
