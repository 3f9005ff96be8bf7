"""How often gRPC calls overlap: each call of a unary method is counted as it begins, and as
overlapping when another call had begun and not yet ended (its response not yet sent: the end
is grpc's done callback), into a `CallOverlap` (service/serving/thread_placement.py, whose
worker's thread placement reads the counts). One client calling one at a time never
overlaps."""

from __future__ import annotations

from typing import Any

import grpc

from service.api.grpc.rpc_handlers import Behavior, HandlerInterceptor, rewrapped, run_behavior
from service.serving.thread_placement import CallOverlap


class CallOverlapInterceptor(HandlerInterceptor):
    """Counts the calls of every unary method into `overlap` (module docstring)."""

    def __init__(self, overlap: CallOverlap) -> None:
        super().__init__()
        self.overlap = overlap

    def intercept(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        if handler.unary_unary is None:
            return handler
        return rewrapped(handler, self._wrap)

    def _wrap(self, behavior: Behavior) -> Behavior:
        overlap = self.overlap

        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            overlap.begin()
            context.add_done_callback(overlap.end)
            return await run_behavior(behavior, request, context)

        return call
