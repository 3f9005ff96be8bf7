"""`strata serve --workers N`: N server processes on one port, and the parent that keeps them.

    pool = WorkerPool(spec, workers=2, say=typer.echo)
    pool.run()                   # until SIGINT or SIGTERM; ServiceError if a worker cannot start

One process serves on one core: every request's Python work runs under one interpreter lock.
A pool runs N whole servers (service/cli/pool/worker.py) that share what is large:

- **One port.** The parent binds the gRPC port (and the HTTP one) with SO_REUSEPORT, never
  listening on it, which holds the port for the pool; each worker listens on it with
  SO_REUSEPORT and the kernel spreads new connections over the workers. A connection stays
  with its worker: a client that wants several workers opens several connections.
- **One copy of the bundle.** Workers are forked from a process that has imported the heavy
  libraries (multiprocessing's forkserver, `PRELOAD`), and map the bundle's files read-only, so
  the libraries' pages and the bundle's are shared; a worker's own memory is its encoder and its
  interpreter's heap.
- **One version per answer.** Each worker follows new versions itself (Redis, or the Milvus
  alias). An AdminService Reload that reaches one worker is done by all of them, to the same
  version: it is answered once the last worker serves it and no call is left on the old one.
  The parent logs `all N workers serve version V` when they agree.
- **One /metrics.** With `--metrics-port`, the parent serves the workers' series summed
  (service/serving/metrics_sum.py), plus `strata_workers` and `strata_worker_restarts_total`.
- **Stopping.** SIGINT or SIGTERM to the parent: every worker gets SIGTERM at once and stops
  within `--grace` (the grace is shared, not added up); one still running `grace + 1` s
  later is killed.
- **Failure.** A worker that dies is started again (at once, or after a back-off that doubles
  while it keeps dying young); only the calls it was running fail. A worker that cannot open the
  bundle at start fails the whole command with its one-line reason.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from service.cli.pool.worker import WorkerSpec, run_worker
from service.cli.serve_setup import cores_of_their_own, usable_cores
from service.errors import ServiceError
from service.serving.metrics_sum import SummedMetrics

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

STOP_MARGIN_S = 1.0  # past the grace, a worker still running is killed
YOUNG_S = 60.0  # a worker that dies sooner than this after its start is restarted with back-off
MAX_BACKOFF_S = 30.0
SCRAPE_TIMEOUT_S = 2.0
# imported in the forkserver the workers are forked from, and frozen there (its docstring)
PRELOAD = ["service.cli.pool.preload"]


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to host:port with SO_REUSEPORT and never listened on: it holds the port
    for the pool's workers (port 0: a free one, read back with getsockname)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    holder = socket.socket(family, kind, proto)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        holder.bind(address)
    except OSError as exc:
        holder.close()
        raise ServiceError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return holder


@dataclass
class Worker:
    index: int
    process: Any  # multiprocessing's Process (forkserver context)
    connection: Connection
    started_at: float
    ready: bool = False
    metrics_port: int | None = None
    version: int | None = None
    hung_up: bool = False  # its end of the pipe is closed: it is exiting


@dataclass
class Ask:
    """A broadcast one worker asked for: who asked, and who has answered."""

    origin: int
    request: int
    pending: set[int]
    payloads: dict[int, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


class WorkerPool:
    """The parent of `strata serve --workers N` (module docstring). `spec.serving.server` is the
    server's as the user gave it; `say` prints the announcement."""

    def __init__(self, spec: WorkerSpec, workers: int, say: Callable[[str], None]) -> None:
        if workers < 1:
            raise ValueError("a pool needs one worker at least")
        self.spec, self.count, self.say = spec, workers, say
        self.workers: dict[int, Worker] = {}
        self.restarts = 0
        self.served_version: int | None = None  # the version every worker agrees on
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(PRELOAD)
        self._holders: list[socket.socket] = []
        self._metrics: SummedMetrics | None = None
        self._requests = itertools.count()
        self._asks: dict[int, Ask] = {}
        self._deaths: dict[int, list[float]] = {}  # worker index -> when it died young
        self._due: dict[int, float] = {}  # worker index -> when it is started again
        self._stopping = False
        self._serving = False  # every worker has served once: a death is restarted from now on
        self._first_lines: list[str] | None = None  # the announcement, from the first ready
        self._wake_read, self._wake_write = socket.socketpair()

    # --- the life of the pool ---

    def run(self) -> None:
        """Start the workers, announce, keep them until a signal, stop them."""
        previous = self._trap_signals()
        try:
            self._start()
            while not self._stopping:
                self._step(self._timeout())
        finally:
            self._stop()
            self._restore_signals(previous)

    def _start(self) -> None:
        config = self.spec.serving.server
        grpc_holder = reserve_port(config.host, config.port)
        self._holders.append(grpc_holder)
        update: dict[str, Any] = {"port": grpc_holder.getsockname()[1], "reuse_port": True}
        if config.http_port is not None:
            http_host = config.http_host or config.host
            http_holder = reserve_port(http_host, config.http_port)
            self._holders.append(http_holder)
            update["http_port"] = http_holder.getsockname()[1]
        public_metrics = None
        if config.metrics_port is not None:
            public_metrics = self._serve_metrics(config.metrics_host or config.host)
            update.update(metrics_port=0, metrics_host="127.0.0.1")
        level = logging.getLogger("service").getEffectiveLevel()  # the command's, -q included
        threads = max(1, usable_cores() // self.count)
        self.spec = replace(
            self.spec,
            serving=replace(self.spec.serving, server=config.model_copy(update=update)),
            workers=self.count,
            public_metrics_port=public_metrics,
            threads=threads,
            gather=cores_of_their_own(self.count, threads),
            log_level=logging.getLevelName(level),
        )
        for index in range(self.count):
            self._launch(index)
        while not all(w.ready for w in self.workers.values()):
            if self._stopping:
                return
            failure = self._step(None)
            if failure is not None:
                raise ServiceError(failure)
        self._serving = True
        for line in self._first_lines or []:
            self.say(line)

    def _launch(self, index: int) -> None:
        parent_end, child_end = self._context.Pipe()
        process = self._context.Process(
            target=run_worker, args=(self.spec, index, child_end), name=f"strata-worker-{index}"
        )
        process.start()
        child_end.close()
        self.workers[index] = Worker(index, process, parent_end, time.monotonic())
        log.debug("worker %d started (pid %d)", index, process.pid)

    def _timeout(self) -> float | None:
        if not self._due:
            return None
        return max(0.0, min(self._due.values()) - time.monotonic())

    def _step(self, timeout: float | None) -> str | None:
        """Wait for one round of events (messages, deaths, signals, a restart due); the reason
        of a worker that failed before it ever served, if one did."""
        now = time.monotonic()
        for index, due in list(self._due.items()):
            if due <= now and not self._stopping:
                del self._due[index]
                self._launch(index)
        live = list(self.workers.values())
        waitables: list[Any] = [self._wake_read]
        waitables += [w.connection for w in live if not w.hung_up]
        waitables += [w.process.sentinel for w in live]
        for ready in wait(waitables, timeout):
            if ready is self._wake_read:
                self._wake_read.recv(512)
                continue
            for worker in live:
                if ready is worker.connection:
                    failure = self._receive(worker)
                    if failure is not None:
                        return failure
                elif ready == worker.process.sentinel and worker.index in self.workers:
                    failure = self._died(worker)
                    if failure is not None:
                        return failure
        return None

    def _receive(self, worker: Worker) -> str | None:
        try:
            message = worker.connection.recv()
        except (EOFError, OSError):
            worker.hung_up = True  # it is exiting: its sentinel says so
            return None
        return self._handle(worker, message)

    def _handle(self, worker: Worker, message: tuple[Any, ...]) -> str | None:
        kind = message[0]
        if kind == "ready":
            details = message[1]
            worker.ready, worker.metrics_port = True, details["metrics_port"]
            worker.version = details["version"]
            if self._first_lines is None:
                self._first_lines = details["lines"]
            log.info("worker %d serving version %s", worker.index, worker.version)
            self._agreed()
        elif kind == "failed":
            if not self._serving:
                return str(message[1])  # the bundle or a model: the same for every worker
            log.error("worker %d could not start: %s", worker.index, message[1])
        elif kind == "served":
            worker.version = message[1]
            self._agreed()
        elif kind == "ask":
            _, request, action, argument = message
            self._broadcast(worker.index, request, action, argument)
        elif kind == "answer":
            _, request, ok, payload = message
            self._answered(worker.index, request, ok, payload)
        return None

    def _died(self, worker: Worker) -> str | None:
        while not worker.hung_up and worker.connection.poll():
            failure = self._receive(worker)  # what it said before it went: a failure's reason
            if failure is not None:
                return failure
        worker.process.join()
        del self.workers[worker.index]
        worker.connection.close()
        for request, ask in list(self._asks.items()):
            if worker.index in ask.pending:
                self._answered(worker.index, request, False, "the worker exited")
        if self._stopping:
            return None
        code = worker.process.exitcode
        if not self._serving:
            return f"worker {worker.index} exited before serving (exit code {code})"
        now = time.monotonic()
        young = [t for t in self._deaths.get(worker.index, []) if now - t < YOUNG_S]
        if now - worker.started_at < YOUNG_S:
            young.append(now)
        self._deaths[worker.index] = young
        delay = min(MAX_BACKOFF_S, 0.5 * 2 ** (len(young) - 1)) if young else 0.0
        self.restarts += 1
        log.warning(
            "worker %d (pid %d) exited (code %s): starting it again in %.1f s",
            worker.index,
            worker.process.pid,
            code,
            delay,
        )
        self._due[worker.index] = now + delay
        return None

    def _agreed(self) -> None:
        versions = {w.version for w in self.workers.values() if w.ready}
        ready = sum(w.ready for w in self.workers.values())
        if len(versions) == 1 and ready == self.count:
            version = versions.pop()
            if version != self.served_version:
                if self.served_version is not None:
                    log.info("all %d workers serve version %s", self.count, version)
                self.served_version = version

    # --- what one worker asks of all ---

    def _broadcast(self, origin: int, request: int, action: str, argument: str | None) -> None:
        ask_id = next(self._requests)
        targets = {w.index for w in self.workers.values() if w.ready}
        self._asks[ask_id] = Ask(origin, request, set(targets))
        for index in targets:
            self._send(self.workers[index], ("do", ask_id, action, argument))

    def _answered(self, index: int, ask_id: int, ok: bool, payload: Any) -> None:
        ask = self._asks.get(ask_id)
        if ask is None or index not in ask.pending:
            return
        ask.pending.discard(index)
        if ok:
            ask.payloads[index] = payload
        else:
            ask.errors.append(f"worker {index}: {payload}")
        if ask.pending:
            return
        del self._asks[ask_id]
        origin = self.workers.get(ask.origin)
        if origin is None:
            return
        if ask.errors:
            self._send(origin, ("result", ask.request, False, "; ".join(ask.errors)))
        else:
            payloads = [ask.payloads[i] for i in sorted(ask.payloads)]
            self._send(origin, ("result", ask.request, True, payloads))

    def _send(self, worker: Worker, message: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError, EOFError):  # it is exiting: its sentinel says so
            worker.connection.send(message)

    # --- stopping ---

    def _trap_signals(self) -> dict[int, Any]:
        def stop(signum: int, frame: object) -> None:
            self._stopping = True

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        self._wake_write.setblocking(False)
        previous[-1] = signal.set_wakeup_fd(self._wake_write.fileno())
        return previous

    def _restore_signals(self, previous: dict[int, Any]) -> None:
        signal.set_wakeup_fd(previous.pop(-1))
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def _stop(self) -> None:
        """SIGTERM to every worker at once; the grace is theirs together; then kill."""
        self._stopping = True
        self._due.clear()
        for worker in self.workers.values():
            if worker.process.is_alive():
                worker.process.terminate()
        deadline = time.monotonic() + self.spec.serving.server.grace_s + STOP_MARGIN_S
        for worker in list(self.workers.values()):
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                log.warning("worker %d still running past the grace: killed", worker.index)
                worker.process.kill()
                worker.process.join()
        self.workers.clear()
        if self._metrics is not None:
            self._metrics.stop()
        for holder in self._holders:
            holder.close()

    # --- the summed /metrics ---

    def _serve_metrics(self, host: str) -> int:
        port = self.spec.serving.server.metrics_port
        assert port is not None
        self._metrics = SummedMetrics(self._worker_ports, self._own_families)
        try:
            return self._metrics.start(host, port)
        except OSError as exc:
            raise ServiceError(f"cannot serve metrics on {host}:{port}: {exc.strerror}") from None

    def _worker_ports(self) -> list[int]:
        workers = list(self.workers.values())
        return [w.metrics_port for w in workers if w.ready and w.metrics_port is not None]

    def _own_families(self, scraped: int) -> list[Metric]:
        workers = GaugeMetricFamily("strata_workers", "Worker processes serving.")
        workers.add_metric([], scraped)
        restarts = CounterMetricFamily(
            "strata_worker_restarts", "Worker processes started again after they died."
        )
        restarts.add_metric([], self.restarts)
        return [workers, restarts]
