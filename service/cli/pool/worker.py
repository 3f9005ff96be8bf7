"""One worker of `strata serve --workers N`: the whole server of a single process, on a port it
shares with the other workers, and its link to the parent (service/cli/pool/parent.py).

    run_worker(spec, index, connection)      # the body of a worker process; never returns

A worker opens the bundle as a single-process server does: its files are memory-mapped
read-only (the store, the FAISS indexes, the postings), so N workers hold one copy of them in
the page cache, and only the encoder and the small arrays are a worker's own. It serves gRPC (and
HTTP when asked) with SO_REUSEPORT on the pool's port; the kernel spreads new connections over
the workers. Its own `/metrics` is on a private port of 127.0.0.1, which the parent sums.

The link is one `multiprocessing` pipe, messages as tuples:

    worker → parent   ("ready", {"lines", "metrics_port", "version"})
                      ("failed", message)          the bundle or the models could not be opened
                      ("served", version)          this worker answers from `version` alone
                      ("ask", request, action, argument)   every worker should act (Reload, Drain)
                      ("answer", request, ok, payload)     this worker has acted
    parent → worker   ("do", request, action, argument)
                      ("result", request, ok, payloads)    the answer to an "ask", by worker

"served" is sent when a swapped-out version's last call has ended (`ServedEngine.on_release`), so
once every worker has said it for a version, none answers from an older one. A worker whose pipe
closes (the parent is gone) stops as on SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import threading
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from service.errors import ServiceError

if TYPE_CHECKING:
    from service.api.server import StrataServer
    from service.cli.serve_setup import ServingConfig
    from service.engine.search import SearchEngine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to open its engine and serve (picklable: it crosses into the
    worker process): the command's one `ServingConfig`, and what the pool sets before it starts
    its workers (service/cli/pool/parent.py) — the serving's server configuration on the pool's
    port with `reuse_port`, how many workers, the summed /metrics' port, `threads` (the cores
    divided among the workers: FAISS's and torch's threads in each), whether each may hold its
    threads to a core of its own (`gather`) and the log level."""

    serving: ServingConfig
    workers: int = 1
    public_metrics_port: int | None = None  # the parent's summed /metrics, for the announcement
    threads: int = 1
    gather: bool = False  # its threads on one core while lightly loaded (cores_of_their_own)
    log_level: str = "WARNING"


class PoolLink:
    """A worker's end of the pipe: what it reports, and the parent's requests it carries out."""

    def __init__(self, connection: Connection, index: int) -> None:
        self.connection, self.index = connection, index
        self._sending = threading.Lock()
        self._requests = itertools.count()
        self._waiting: dict[int, asyncio.Future[list[dict[str, Any]]]] = {}
        self._server: StrataServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def send(self, *message: Any) -> None:
        # the parent gone: the reader sees it and stops this worker
        with self._sending, contextlib.suppress(OSError, EOFError):
            self.connection.send(message)

    def attach(self, server: StrataServer, loop: asyncio.AbstractEventLoop) -> None:
        """Serve the parent's requests on `server` (from now on), and report its swaps."""
        self._server, self._loop = server, loop
        server.pool = self
        served = server.served
        previous = served.on_release

        def released(engine: SearchEngine) -> None:
            if previous is not None:
                previous(engine)
            self.send("served", served.engine.bundle.version)

        served.on_release = released
        threading.Thread(target=self._read, name="strata-pool-link", daemon=True).start()

    async def ask(self, action: str, argument: str | None) -> list[dict[str, Any]]:
        """Have every worker do `action` (this one too); their payloads, by worker index. A
        ServiceError when any of them failed, naming it."""
        loop = asyncio.get_running_loop()
        request = next(self._requests)
        future: asyncio.Future[list[dict[str, Any]]] = loop.create_future()
        self._waiting[request] = future
        self.send("ask", request, action, argument)
        try:
            return await future
        finally:
            self._waiting.pop(request, None)

    def _read(self) -> None:
        while True:
            try:
                message = self.connection.recv()
            except (EOFError, OSError):
                log.warning("the pool's parent is gone: stopping")
                os.kill(os.getpid(), signal.SIGTERM)
                return
            kind = message[0]
            if kind == "do":
                _, request, action, argument = message
                self._do(request, action, argument)
            elif kind == "result":
                _, request, ok, payload = message
                assert self._loop is not None
                self._loop.call_soon_threadsafe(self._settle, request, ok, payload)

    def _settle(self, request: int, ok: bool, payload: Any) -> None:
        future = self._waiting.get(request)
        if future is None or future.done():
            return
        if ok:
            future.set_result(payload)
        else:
            future.set_exception(ServiceError(str(payload)))

    def _do(self, request: int, action: str, argument: str | None) -> None:
        assert self._loop is not None
        work = asyncio.run_coroutine_threadsafe(self._act(action, argument), self._loop)

        def done(finished: Any) -> None:
            error = finished.exception()
            if error is None:
                self.send("answer", request, True, finished.result())
            else:
                self.send("answer", request, False, str(error) or type(error).__name__)

        work.add_done_callback(done)

    async def _act(self, action: str, argument: str | None) -> dict[str, Any]:
        from service.api.grpc.admin import Admin

        server = self._server
        assert server is not None
        if action == "reload":
            return asdict(await Admin(server).reload_here(argument, drained=True))
        if action == "drain":
            await server.drain()
            return {"serving": server.serving}
        raise ServiceError(f"unknown pool action {action!r}")


def run_worker(spec: WorkerSpec, index: int, connection: Connection) -> None:
    """The body of worker `index`: open the engine, serve until SIGTERM, exit (never returns)."""
    from service.cli import configure_logging
    from service.cli.serve_setup import exit_now

    os.setpgid(0, 0)  # Ctrl-C reaches the parent, which stops the workers within the grace
    link = PoolLink(connection, index)
    configure_logging(spec.log_level, f"strata[worker {index}]")
    try:
        serve_worker(spec, link)
    except Exception as exc:  # a bundle or a model that cannot be opened: one line to the parent
        link.send("failed", " ".join(str(exc).split()) or type(exc).__name__)
        connection.close()
        os._exit(1)
    exit_now()


def serve_worker(spec: WorkerSpec, link: PoolLink) -> None:
    from service.api.server import serve
    from service.cli.serve_setup import Announcement, open_engine
    from service.engine.compute_threads import limit_threads
    from service.query.cache import open_cache
    from service.serving.metrics import ServerMetrics
    from service.serving.thread_placement import ThreadPlacement, gathering_core
    from training.core.encoders import resolve_device

    serving = spec.serving
    limit_threads(spec.threads)
    device = resolve_device(serving.device)
    metrics = ServerMetrics()
    cache = open_cache(serving.redis_url, serving.redis_prefix, metrics=metrics)
    engine = open_engine(serving, device, cache)
    announcement = Announcement(engine, serving, cache)

    def ready(server: StrataServer) -> None:
        cache.report_state()
        link.attach(server, asyncio.get_running_loop())
        lines = announcement.lines(server, spec.workers, spec.public_metrics_port)
        details = {
            "lines": lines,
            "metrics_port": server.metrics_port,
            "version": server.served.engine.bundle.version,
        }
        link.send("ready", details)
        announcement.follow(server)
        if spec.gather:  # its threads on one core while its calls come one at a time
            placement = ThreadPlacement(gathering_core(link.index), server.overlap, metrics)
            placement.start(asyncio.get_running_loop())

    try:
        asyncio.run(serve(engine, serving.server, on_ready=ready, metrics=metrics))
    finally:
        cache.close()
