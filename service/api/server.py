"""The gRPC server: strata.v1.SearchService over one bundle, plus health and reflection.

    engine = SearchEngine.open("runs/bundles", device="auto")   # CUDA for the encoder if present
    await serve(engine, ServerConfig(port=50051))                 # until SIGINT / SIGTERM

A grpc.aio server on one event loop; searches are micro-batched (service/serving/batching.py) and
run, like every other encoder or FAISS call, on the engine's threads (one per lane of the
batcher, `BatchingConfig.lanes`). The standard health service
(`grpc.health.v1`, SERVING once the bundle is loaded, NOT_SERVING while stopping) and server
reflection (so `grpcurl` can list and call the methods) are registered beside it. Stopping is
graceful: the server refuses new calls, lets running ones finish within `grace_s`, then the
batcher and the engine threads are shut down.

Production surface (all optional, all off by default): Prometheus metrics on their own HTTP
port (`metrics_port`; service/serving/metrics.py lists the series), the token-guarded
`strata.v1.AdminService` (`admin_token`; Reload, Drain, Status — service/api/grpc/admin.py), and TLS
(`tls_cert` + `tls_key`), and the HTTP/JSON API with the page on a port of its own
(`http_port`; service/api/http/app.py), on the same loop, servicer and engine.
`swap_engine(new_engine)` is the one place the served engine changes.

`BackgroundServer` (service/api/background.py) runs the same server on a loop in a daemon
thread: for tests, notebooks and load scripts that want a live server in-process.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from pydantic import ConfigDict, Field, field_validator, model_validator

from service._generated.strata.v1 import admin_pb2, admin_pb2_grpc, search_pb2, search_pb2_grpc
from service.api.grpc.admin import Admin, AdminServicer
from service.api.grpc.admin_auth import AdminAuthInterceptor
from service.api.grpc.call_overlap import CallOverlapInterceptor
from service.api.grpc.request_decoding import UndecodableRequestInterceptor
from service.api.grpc.requests import MAX_MESSAGE_BYTES
from service.api.grpc.rpc_errors import ErrorStatusInterceptor
from service.api.grpc.rpc_handlers import HandlerChain, HandlerInterceptor
from service.api.grpc.rpc_metrics import MetricsInterceptor
from service.api.grpc.servicer import SearchServicer
from service.engine.compute_threads import same_threads, warm_lane
from service.engine.search import SearchEngine
from service.errors import ServiceError
from service.limits import MAX_REQUEST_BYTES
from service.results import SearchResult
from service.serving.batching import BatchingConfig, MicroBatcher
from service.serving.metrics import ServerMetrics
from service.serving.query_kind import query_kind
from service.serving.served_engine import PinnedQuery, ServedEngine, search_pinned
from service.serving.thread_placement import CallOverlap
from training.core.config import ConfigModel

if TYPE_CHECKING:
    from service.api.grpc.admin import PoolPeers
    from service.api.http.server import HttpEndpoint

log = logging.getLogger(__name__)

SERVICE_NAME = search_pb2.DESCRIPTOR.services_by_name["SearchService"].full_name
ADMIN_SERVICE_NAME = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name


class ServerConfig(ConfigModel):
    """Where and how the server listens; the optional production surface (module docstring)."""

    model_config = ConfigDict(frozen=True)

    host: str = "127.0.0.1"
    port: int = 50051  # 0: any free port (read it back from `StrataServer.port`)
    batching: BatchingConfig = Field(default_factory=BatchingConfig)
    grace_s: float = 5.0
    max_message_bytes: int = MAX_REQUEST_BYTES  # a request message at most (RESOURCE_EXHAUSTED)
    max_concurrent_rpcs: int = 256  # calls in progress at most; beyond: RESOURCE_EXHAUSTED
    metrics_port: int | None = None  # /metrics over HTTP: None off, 0 any free port
    metrics_host: str | None = None  # where /metrics listens; None: `host`
    admin_token: str | None = Field(default=None, repr=False)  # None: no AdminService
    tls_cert: Path | None = None  # PEM certificate chain and key: both or neither
    tls_key: Path | None = None
    bundles_dir: Path | None = None  # where Reload finds versions; None: the served one's parent
    http_port: int | None = None  # the HTTP/JSON API and the page: None off, 0 any free port
    http_host: str | None = None  # where the HTTP API listens; None: `host`
    image_root: Path | None = None  # relative image paths and thumbnails; None: the bundle's
    # a worker of `strata serve --workers N` (service/cli/pool/parent.py): its gRPC and HTTP ports
    # are shared with the other workers (SO_REUSEPORT; the kernel spreads connections over them)
    reuse_port: bool = False

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both a certificate and its key (tls_cert, tls_key)")
        return self

    @field_validator("admin_token")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("the admin token is empty")
        return value


class StrataServer:
    """One grpc.aio server around a loaded engine. `start()`, then `stop()` (same loop).

    `metrics`: the series this server records (a new `ServerMetrics` when not given); pass the
    one the query cache was given, so that the cache's series are this server's. `clock`: the
    micro-batcher's (queries' arrivals and deadlines; tests move a clock of their own)."""

    def __init__(
        self,
        engine: SearchEngine,
        config: ServerConfig | None = None,
        metrics: ServerMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.served = ServedEngine(engine)
        self.config = config or ServerConfig()
        self.port: int | None = None
        self.metrics = metrics or ServerMetrics()
        self.metrics_port: int | None = None
        self.overlap = CallOverlap()  # how often gRPC calls overlap (a worker's thread placement)
        self.executor = ThreadPoolExecutor(
            max_workers=self.config.batching.lanes,
            thread_name_prefix="strata-engine",
            initializer=same_threads(every_core=False),  # where the serving threads are
        )
        # each query on the engine its call leased; encoder calls timed into this server's metrics
        self.batcher: MicroBatcher[PinnedQuery, SearchResult] = MicroBatcher(
            partial(search_pinned, metrics=self.metrics),
            self.config.batching,
            self.executor,
            clock,
            cheap=query_kind,
        )
        self.servicer = SearchServicer(
            self.served, self.batcher, self.executor, self.metrics, engine.config.limits
        )
        self.health: health.aio.HealthServicer | None = None
        self.serving = False  # what the health service last reported
        self.draining = False
        self.started_at = time.monotonic()
        self._server: grpc.aio.Server | None = None
        self.http: HttpEndpoint | None = None
        self.http_port: int | None = None
        self.pool: PoolPeers | None = None  # a worker of a pool: how it reaches the others
        self.metrics.track_queue(lambda: self.batcher.waiting)
        self._publish_bundle()

    @property
    def bundles_dir(self) -> Path:
        """The bundle directory Reload reads versions (and CURRENT) from."""
        return self.config.bundles_dir or self.served.engine.bundle.path.parent

    def _publish_bundle(self) -> None:
        bundle = self.served.engine.bundle
        size = sum(record.bytes for record in bundle.manifest.files.values())
        self.metrics.set_bundle(bundle.version, bundle.rows, size)

    def swap_engine(self, new_engine: SearchEngine) -> SearchEngine:
        """Serve `new_engine` from now on and return the old one: the one place the served engine
        changes. Calls already running (a BatchSearch between its chunks too) finish on the
        engine they leased, which is released when the last of them ends. Safe
        from any thread; counts strata_hot_swaps_total{result="ok"} and sets the bundle gauges
        (a failed swap attempt is counted by its caller: `metrics.record_hot_swap(False)`)."""
        old = self.served.swap(new_engine)
        self._publish_bundle()
        self.metrics.record_hot_swap(True)
        log.info("swapped bundle %s for %s", old.bundle.name, new_engine.bundle.name)
        return old

    async def set_serving(self, serving: bool) -> None:
        """Report SERVING or NOT_SERVING for "" and the SearchService (health and metrics)."""
        status = health_pb2.HealthCheckResponse.SERVING
        if not serving:
            status = health_pb2.HealthCheckResponse.NOT_SERVING
        if self.health is not None:
            for name in ("", SERVICE_NAME):
                await self.health.set(name, status)
        self.serving = serving
        self.metrics.set_serving(serving)

    async def drain(self) -> None:
        """NOT_SERVING from now on (load balancers move away); calls still arriving are served."""
        self.draining = True
        await self.set_serving(False)
        log.info("draining: health reports NOT_SERVING")

    @property
    def address(self) -> str:
        return f"{self.config.host}:{self.port}"

    async def start(self) -> int:
        """Bind and start serving, the encoder warmed on the first lane (`warm_lane`); the
        bound port (useful with port 0)."""
        warm_lane(self.executor, self.served.engine.encoder)
        options = [
            ("grpc.max_receive_message_length", self.config.max_message_bytes),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # a busy port is an error, not a silently shared one, unless the pool shares it
            ("grpc.so_reuseport", 1 if self.config.reuse_port else 0),
        ]
        links: list[HandlerInterceptor] = [
            MetricsInterceptor(self.metrics),  # outermost: it sees every status, aborts included
            CallOverlapInterceptor(self.overlap),
            UndecodableRequestInterceptor(),
        ]
        if self.config.admin_token is not None:
            links.append(AdminAuthInterceptor(ADMIN_SERVICE_NAME, self.config.admin_token))
        links.append(ErrorStatusInterceptor({SERVICE_NAME, ADMIN_SERVICE_NAME}))
        server = grpc.aio.server(
            options=options,
            interceptors=[HandlerChain(links)],  # one of grpc's per call, not four
            maximum_concurrent_rpcs=self.config.max_concurrent_rpcs,
        )
        search_pb2_grpc.add_SearchServiceServicer_to_server(self.servicer, server)
        services = [SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME]
        self.metrics.preset_methods(SERVICE_NAME, _unary_methods(search_pb2, "SearchService"))
        if self.config.admin_token is not None:
            admin = AdminServicer(Admin(self))
            admin_pb2_grpc.add_AdminServiceServicer_to_server(admin, server)
            services.append(ADMIN_SERVICE_NAME)
            self.metrics.preset_methods(
                ADMIN_SERVICE_NAME, _unary_methods(admin_pb2, "AdminService")
            )
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(services, server)
        await self.set_serving(False)  # until the port is bound and the server started
        try:
            port = self._listen(server)
            await server.start()
        except BaseException:
            self.metrics.close()
            await server.stop(None)
            raise
        try:
            await self._start_http()
        except BaseException:
            self.metrics.close()
            await server.stop(None)
            raise
        self.started_at = time.monotonic()
        await self.set_serving(True)  # the bundle is loaded: the engine exists
        self._server, self.port = server, port
        log.info(
            "serving bundle %s (%d rows, %s) on %s",
            self.served.engine.bundle.name,
            self.served.engine.bundle.rows,
            self.served.engine.bundle.manifest.encoder,
            self.address,
        )
        return port

    async def _start_http(self) -> None:
        """The HTTP/JSON API and the page on their own port (service/api/http/app.py), if asked."""
        if self.config.http_port is None:
            return
        from service.api.http.app import HttpApi, HttpConfig
        from service.api.http.server import HttpEndpoint

        api = HttpApi(
            self.servicer,
            self.metrics,
            serving=lambda: self.serving,
            config=HttpConfig(
                body_bytes=2 * self.config.max_message_bytes,
                max_message_bytes=self.config.max_message_bytes,
                image_root=self.config.image_root,
            ),
            overlap=self.overlap,
        )
        host = self.config.http_host or self.config.host
        self.http = HttpEndpoint(
            api.app(),
            host,
            self.config.http_port,
            self.config.max_concurrent_rpcs,
            self.config.grace_s,
            reuse_port=self.config.reuse_port,
        )
        self.http_port = await self.http.start()

    @property
    def http_address(self) -> str | None:
        if self.http_port is None:
            return None
        return f"{self.config.http_host or self.config.host}:{self.http_port}"

    def _listen(self, server: grpc.aio.Server) -> int:
        """Bind the gRPC port (TLS when configured) and start /metrics; the gRPC port."""
        target = f"{self.config.host}:{self.config.port}"
        try:
            if self.config.tls_cert is not None and self.config.tls_key is not None:
                port = server.add_secure_port(target, _tls_credentials(self.config))
            else:
                port = server.add_insecure_port(target)
        except RuntimeError as exc:
            raise ServiceError(f"cannot listen on {target}: {exc}") from None
        if port == 0:
            raise ServiceError(f"cannot listen on {target} (address in use?)")
        if self.config.metrics_port is not None:
            host = self.config.metrics_host or self.config.host
            try:
                self.metrics_port = self.metrics.start_http(host, self.config.metrics_port)
            except OSError as exc:
                raise ServiceError(
                    f"cannot serve metrics on {host}:{self.config.metrics_port}: {exc}"
                ) from None
        return port

    async def stop(self, grace: float | None = None) -> None:
        """Refuse new calls, let running ones finish (at most `grace` s), release threads."""
        if self._server is None:
            return
        self.draining, self.serving = True, False
        self.metrics.set_serving(False)
        if self.health is not None:
            await self.health.enter_graceful_shutdown()
        grace_s = self.config.grace_s if grace is None else grace
        stopping = [self._server.stop(grace_s)]
        if self.http is not None:
            stopping.append(self.http.stop(grace_s))  # both transports drain together
        await asyncio.gather(*stopping)
        await self.batcher.close()
        self.executor.shutdown(wait=True)
        self.metrics.close()
        self._server = None
        log.info("stopped serving on %s", self.address)


def _unary_methods(module: object, service: str) -> list[tuple[str, str]]:
    """(method, grpc_type) of every method of a service in a generated *_pb2 module."""
    descriptor = module.DESCRIPTOR.services_by_name[service]  # type: ignore[attr-defined]
    return [(m.name, "unary") for m in descriptor.methods]


def _tls_credentials(config: ServerConfig) -> grpc.ServerCredentials:
    assert config.tls_cert is not None and config.tls_key is not None
    pem = []
    for what, path in (("certificate", config.tls_cert), ("key", config.tls_key)):
        if not Path(path).is_file():
            raise ServiceError(f"TLS {what} file not found: {path}")
        pem.append(Path(path).read_bytes())
    return grpc.ssl_server_credentials([(pem[1], pem[0])])


async def serve(
    engine: SearchEngine,
    config: ServerConfig | None = None,
    on_ready: Callable[[StrataServer], None] | None = None,
    metrics: ServerMetrics | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM, then stop gracefully."""
    server = StrataServer(engine, config, metrics)
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
