"""The AdminService's bearer token, checked by one interceptor before any admin method runs.

    authorization: Bearer <token>     (the metadata every AdminService call carries)

No such entry: UNAUTHENTICATED "AdminService needs the metadata 'authorization: Bearer
<token>'"; another token: UNAUTHENTICATED "wrong admin token" (compared in constant time).
Calls of other services pass untouched.
"""

from __future__ import annotations

import hmac
from typing import Any

import grpc

from service.api.grpc.rpc_handlers import Behavior, HandlerInterceptor, rewrapped, run_behavior

BEARER = "bearer "
MISSING = "AdminService needs the metadata 'authorization: Bearer <token>'"
WRONG = "wrong admin token"


def bearer_token(metadata: object) -> str | None:
    """The token of an `authorization: Bearer <token>` metadata entry, if any."""
    for key, value in metadata or ():  # type: ignore[attr-defined]
        if key.lower() == "authorization" and isinstance(value, str):
            if value[: len(BEARER)].lower() == BEARER:
                return value[len(BEARER) :].strip()
            return None
    return None


class AdminAuthInterceptor(HandlerInterceptor):
    """Guards every method of `service` (the AdminService's full name) with `token`."""

    def __init__(self, service: str, token: str) -> None:
        super().__init__()
        self.prefix = f"/{service}/"
        self._token = token.strip().encode()

    def intercept(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        if not method.startswith(self.prefix):
            return handler
        return rewrapped(handler, self._guarded)

    def refusal(self, metadata: object) -> str | None:
        """Why a call with `metadata` is refused; None: its token is the admin token."""
        given = bearer_token(metadata)
        if given is None:
            return MISSING
        if not hmac.compare_digest(given.encode(), self._token):
            return WRONG
        return None

    def _guarded(self, behavior: Behavior) -> Behavior:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            refused = self.refusal(context.invocation_metadata())
            if refused is not None:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, refused)
            return await run_behavior(behavior, request, context)

        return call
