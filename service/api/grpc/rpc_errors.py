"""The one mapping of the service's errors to gRPC statuses, applied by one interceptor.

    QueryError      INVALID_ARGUMENT     NotFoundError   NOT_FOUND
    OverloadedError RESOURCE_EXHAUSTED   DeadlineError   DEADLINE_EXCEEDED
    InternalError   INTERNAL             UnavailableError UNAVAILABLE
    other ServiceError FAILED_PRECONDITION (EncoderUnavailableError: a text or image query
                       to a bundle whose encoder this machine cannot load)
    anything else   INTERNAL, "internal error: …" (logged with its traceback)

Handlers of the services named (SearchService, AdminService) raise; `ErrorStatusInterceptor`
aborts the call with the mapped status and the error's message cut by `errors.bounded`. An
abort already under way (a handler's or another interceptor's) passes through untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

import grpc

from service.api.grpc.rpc_handlers import (
    Behavior,
    HandlerInterceptor,
    rewrapped,
    run_behavior,
    split_method,
)
from service.errors import (
    DeadlineError,
    InternalError,
    NotFoundError,
    OverloadedError,
    QueryError,
    ServiceError,
    UnavailableError,
    bounded,
)

log = logging.getLogger(__name__)

STATUSES: tuple[tuple[type[ServiceError], grpc.StatusCode], ...] = (
    (QueryError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (OverloadedError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (DeadlineError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (InternalError, grpc.StatusCode.INTERNAL),
    (UnavailableError, grpc.StatusCode.UNAVAILABLE),
    (ServiceError, grpc.StatusCode.FAILED_PRECONDITION),
)  # the first match wins: subclasses before ServiceError


def status_of(error: BaseException) -> grpc.StatusCode:
    """The gRPC status an error maps to (INTERNAL for anything not a ServiceError)."""
    for kind, status in STATUSES:
        if isinstance(error, kind):
            return status
    return grpc.StatusCode.INTERNAL


def status_message(error: BaseException) -> str:
    """What the caller reads: a ServiceError's own message; else "internal error: …"."""
    if isinstance(error, ServiceError):
        return bounded(str(error))
    return bounded(f"internal error: {error}")


class ErrorStatusInterceptor(HandlerInterceptor):
    """Aborts a call of one of `services` whose handler raised, with the mapped status."""

    def __init__(self, services: Collection[str]) -> None:
        super().__init__()
        self.services = frozenset(services)

    def intercept(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        service, _ = split_method(method)
        if handler.unary_unary is None or service not in self.services:
            return handler
        return rewrapped(handler, lambda behavior: _mapped(behavior, method))


def _mapped(behavior: Behavior, method: str) -> Behavior:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await run_behavior(behavior, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            if not isinstance(exc, ServiceError):
                log.exception("%s: internal error", method)
            await context.abort(status_of(exc), status_message(exc))
        raise AssertionError("unreachable: abort raises")

    return call
