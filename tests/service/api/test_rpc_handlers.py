"""HandlerChain: several handler interceptors as one, the first link outermost, each method's
handler rewritten once."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from service.api.grpc.rpc_handlers import (
    Behavior,
    HandlerChain,
    HandlerInterceptor,
    rewrapped,
    run_behavior,
)


class Recording(HandlerInterceptor):
    """Wraps a behaviour so that a call appends `name` on the way in and out."""

    def __init__(self, name: str, trail: list[str], rewrites: list[str]) -> None:
        super().__init__()
        self.name, self.trail, self.rewrites = name, trail, rewrites

    def intercept(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        self.rewrites.append(f"{self.name} {method}")
        return rewrapped(handler, self._wrap)

    def _wrap(self, behavior: Behavior) -> Behavior:
        async def call(request: Any, context: Any) -> Any:
            self.trail.append(f"{self.name} in")
            answer = await run_behavior(behavior, request, context)
            self.trail.append(f"{self.name} out")
            return answer

        return call


def test_the_first_link_is_outermost_and_a_method_is_rewritten_once():
    trail: list[str] = []
    rewrites: list[str] = []
    chain = HandlerChain([Recording(n, trail, rewrites) for n in ("outer", "middle", "inner")])

    def answer(request: str, context: object) -> str:
        trail.append("behaviour")
        return request.upper()

    base = grpc.unary_unary_rpc_method_handler(answer)

    async def found(details: Any) -> grpc.RpcMethodHandler:
        return base

    details = type("Details", (), {"method": "/p.S/M", "invocation_metadata": ()})()

    async def two_calls() -> list[str]:
        answers = []
        for _ in range(2):
            handler = await chain.intercept_service(found, details)
            answers.append(await handler.unary_unary("q", None))
        return answers

    assert asyncio.run(two_calls()) == ["Q", "Q"]
    assert rewrites == ["inner /p.S/M", "middle /p.S/M", "outer /p.S/M"]  # once, not per call
    assert trail[:7] == [
        "outer in",
        "middle in",
        "inner in",
        "behaviour",
        "inner out",
        "middle out",
        "outer out",
    ]
