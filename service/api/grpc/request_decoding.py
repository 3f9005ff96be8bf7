"""Requests whose bytes do not parse: INVALID_ARGUMENT naming the fault, not grpc's UNKNOWN.

grpc deserializes a request before any interceptor sees the call, and answers UNKNOWN when that
fails. `UndecodableRequestInterceptor` makes the deserializer lenient (bad bytes become an
`Undecodable` value) and the method refuse that value with INVALID_ARGUMENT. It applies to
unary-unary methods (Strata's services have no other kind); other handlers are left as grpc
has them.
"""

from __future__ import annotations

from typing import Any

import grpc

from service.api.grpc.rpc_handlers import Behavior, HandlerInterceptor, rewrapped, run_behavior
from service.errors import bounded


class Undecodable:
    """What a request that does not parse deserializes to (instead of raising in grpc)."""

    def __init__(self, message_type: str, error: Exception) -> None:
        self.message_type, self.error = message_type, error


class UndecodableRequestInterceptor(HandlerInterceptor):
    """Answers a request whose bytes are no valid message of its type with INVALID_ARGUMENT."""

    def intercept(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        if handler.unary_unary is None or handler.request_deserializer is None:
            return handler
        deserialize = handler.request_deserializer
        owner = getattr(deserialize, "__self__", None)
        descriptor = getattr(owner, "DESCRIPTOR", None)
        message_type = getattr(descriptor, "full_name", "request message")

        def lenient(data: bytes) -> object:
            try:
                return deserialize(data)
            except Exception as exc:
                return Undecodable(message_type, exc)

        return rewrapped(handler, _refusing_undecodable, request_deserializer=lenient)


def _refusing_undecodable(behavior: Behavior) -> Behavior:
    async def call(request: object, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                bounded(f"the request is not a valid {request.message_type}: {request.error}"),
            )
        return await run_behavior(behavior, request, context)

    return call
