"""A gRPC method handler with its behaviour wrapped: what every server interceptor returns.

An interceptor of grpc.aio gets the handler grpc would run and hands back another one
(`HandlerInterceptor.intercept`, for methods grpc knows); the four kinds (unary-unary,
unary-stream, stream-unary, stream-stream) differ only in which attribute holds the behaviour
and which factory makes the handler, so `rewrapped` keeps the kind, the (de)serializers, and
swaps the behaviour for `wrap(behaviour)`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc

Behavior = Callable[..., Any]
Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]]


class HandlerInterceptor(grpc.aio.ServerInterceptor):
    """A server interceptor that rewrites the handler of each method grpc knows (an unknown
    method, None, passes: grpc answers UNIMPLEMENTED itself).

    grpc asks for the handler on every call; the rewritten one is a function of the method and
    the handler alone, so it is built once per (method, handler) and reused (a handler the
    interceptors inside this one rebuilt per call is rewritten per call: it is a new object)."""

    def __init__(self) -> None:
        self._rewritten: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        known = self._rewritten.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        rewritten = self.intercept(handler, method)
        self._rewritten[method] = (handler, rewritten)
        return rewritten

    def intercept(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        """The handler to run for `method` ("/package.Service/Method") instead of `handler`."""
        raise NotImplementedError


class HandlerChain(HandlerInterceptor):
    """Several handler interceptors as one, `links` outermost first: each method's handler is
    rewritten by all of them once, and a call passes one interceptor of grpc's instead of one
    per link (grpc.aio awaits each interceptor of its list on every call, to find the
    handler)."""

    def __init__(self, links: Sequence[HandlerInterceptor]) -> None:
        super().__init__()
        self.links = tuple(links)

    def intercept(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        for link in reversed(self.links):
            handler = link.intercept(handler, method)
        return handler


async def run_behavior(behavior: Behavior, request: Any, context: grpc.aio.ServicerContext) -> Any:
    """A unary behaviour's answer, whether it is a coroutine function or a plain one."""
    result = behavior(request, context)
    return await result if inspect.isawaitable(result) else result


_FACTORIES = (
    ("unary_unary", grpc.unary_unary_rpc_method_handler),
    ("unary_stream", grpc.unary_stream_rpc_method_handler),
    ("stream_unary", grpc.stream_unary_rpc_method_handler),
    ("stream_stream", grpc.stream_stream_rpc_method_handler),
)


def rewrapped(
    handler: grpc.RpcMethodHandler,
    wrap: Callable[[Behavior], Behavior],
    request_deserializer: Callable[[bytes], Any] | None = None,
) -> grpc.RpcMethodHandler:
    """`handler` of the same kind with behaviour `wrap(behaviour)` (and, when given, another
    request deserializer)."""
    for kind, factory in _FACTORIES:
        behavior = getattr(handler, kind)
        if behavior is not None:
            return factory(
                wrap(behavior),
                request_deserializer=request_deserializer or handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
    return handler


def split_method(full_method: str) -> tuple[str, str]:
    """ "/strata.v1.SearchService/Search" → ("strata.v1.SearchService", "Search")."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service or "unknown", method or "unknown"
