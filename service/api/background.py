"""A Strata server running in-process on its own event loop, in a daemon thread: for tests,
notebooks and load scripts that want a live server beside their own code."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from service.api.server import ServerConfig, StrataServer
from service.engine.search import SearchEngine
from service.serving.metrics import ServerMetrics


class BackgroundServer:
    """A StrataServer on its own event loop in a daemon thread.

    with BackgroundServer(engine, ServerConfig(port=0)) as server:
        client = StrataClient(server.target)
    """

    def __init__(
        self,
        engine: SearchEngine,
        config: ServerConfig | None = None,
        metrics: ServerMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server = StrataServer(engine, config, metrics, clock)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def port(self) -> int:
        assert self.server.port is not None, "not started"
        return self.server.port

    @property
    def target(self) -> str:
        return self.server.address

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The server's event loop (start loop-bound helpers on it, e.g. a HotSwapper)."""
        return self._loop

    def start(self, timeout: float = 30.0) -> BackgroundServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(timeout)
        return self

    def stop(self, grace: float = 1.0, timeout: float = 30.0) -> None:
        if self._loop.is_running():
            future = asyncio.run_coroutine_threadsafe(self.server.stop(grace), self._loop)
            future.result(timeout)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
        self._loop.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
