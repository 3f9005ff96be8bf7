"""The gRPC server: strata.v1.SearchService over one bundle, plus health and reflection.

    engine = SearchEngine.open("runs/bundles", device="auto")   # CUDA for the encoder if present
    await serve(engine, ServerConfig(port=50051))                 # until SIGINT / SIGTERM

A grpc.aio server on one event loop; searches are micro-batched (service/batching.py) and run,
like every other encoder or FAISS call, on one engine thread. The standard health service
(`grpc.health.v1`, SERVING once the bundle is loaded, NOT_SERVING while stopping) and server
reflection (so `grpcurl` can list and call the methods) are registered beside it. Stopping is
graceful: the server refuses new calls, lets running ones finish within `grace_s`, then the
batcher and the engine thread are shut down.

`BackgroundServer` runs the same server on a loop in a daemon thread: for tests, notebooks and
load scripts that want a live server in-process.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from service._generated.strata.v1 import search_pb2, search_pb2_grpc
from service.batching import BatchingConfig, MicroBatcher
from service.convert import MAX_MESSAGE_BYTES
from service.errors import ServiceError
from service.results import SearchQuery, SearchResult
from service.search import SearchEngine
from service.servicer import SearchServicer

log = logging.getLogger(__name__)

SERVICE_NAME = search_pb2.DESCRIPTOR.services_by_name["SearchService"].full_name


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 50051  # 0: any free port (read it back from `StrataServer.port`)
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    grace_s: float = 5.0
    max_message_bytes: int = MAX_MESSAGE_BYTES


class StrataServer:
    """One grpc.aio server around a loaded engine. `start()`, then `stop()` (same loop)."""

    def __init__(self, engine: SearchEngine, config: ServerConfig | None = None) -> None:
        self.engine = engine
        self.config = config or ServerConfig()
        self.port: int | None = None
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-engine")
        self.batcher: MicroBatcher[SearchQuery, SearchResult] = MicroBatcher(
            engine.search_batch, self.config.batching, self.executor
        )
        self.health: health.aio.HealthServicer | None = None
        self._server: grpc.aio.Server | None = None

    @property
    def address(self) -> str:
        return f"{self.config.host}:{self.port}"

    async def start(self) -> int:
        """Bind and start serving; the bound port (useful with port 0)."""
        options = [
            ("grpc.max_receive_message_length", self.config.max_message_bytes),
            ("grpc.max_send_message_length", self.config.max_message_bytes),
            ("grpc.so_reuseport", 0),  # a busy port is an error, not a silently shared one
        ]
        server = grpc.aio.server(options=options)
        search_pb2_grpc.add_SearchServiceServicer_to_server(
            SearchServicer(self.engine, self.batcher, self.executor), server
        )
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        target = f"{self.config.host}:{self.config.port}"
        try:
            port = server.add_insecure_port(target)
        except RuntimeError as exc:
            raise ServiceError(f"cannot listen on {target}: {exc}") from None
        if port == 0:
            raise ServiceError(f"cannot listen on {target} (address in use?)")
        await server.start()
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._server, self.port = server, port
        log.info(
            "serving bundle %s (%d rows, %s) on %s",
            self.engine.bundle.name,
            self.engine.bundle.rows,
            self.engine.bundle.manifest.encoder,
            self.address,
        )
        return port

    async def stop(self, grace: float | None = None) -> None:
        """Refuse new calls, let running ones finish (at most `grace` s), release threads."""
        if self._server is None:
            return
        if self.health is not None:
            await self.health.enter_graceful_shutdown()
        await self._server.stop(self.config.grace_s if grace is None else grace)
        await self.batcher.close()
        self.executor.shutdown(wait=True)
        self._server = None
        log.info("stopped serving on %s", self.address)


async def serve(
    engine: SearchEngine,
    config: ServerConfig | None = None,
    on_ready: Callable[[StrataServer], None] | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM, then stop gracefully."""
    server = StrataServer(engine, config)
    await server.start()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    if on_ready is not None:
        on_ready(server)
    try:
        await stopping.wait()
        log.info("stopping (grace %.1f s)", server.config.grace_s)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await server.stop()


class BackgroundServer:
    """A StrataServer on its own event loop in a daemon thread.

    with BackgroundServer(engine, ServerConfig(port=0)) as server:
        client = StrataClient(server.target)
    """

    def __init__(self, engine: SearchEngine, config: ServerConfig | None = None) -> None:
        self.server = StrataServer(engine, config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def port(self) -> int:
        assert self.server.port is not None, "not started"
        return self.server.port

    @property
    def target(self) -> str:
        return self.server.address

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
