"""The parts of `strata serve` (service/cli/serve.py): the server's configuration from the
command's options (checked before anything heavy loads), the engine over the chosen backend,
the lines announcing what is served and the followers of new versions, and the fast exit.
"""

from __future__ import annotations

import errno
import math
import os
import socket
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from training.core.config import build_config
from training.core.errors import InputError
from training.core.settings import StrataSettings, load_settings

if TYPE_CHECKING:
    from service.api.server import ServerConfig, StrataServer
    from service.engine.search import SearchEngine
    from service.query.cache import QueryCache
    from service.serving.alias_follower import AliasFollower
    from service.serving.hot_swap import HotSwapper

ADMIN_TOKEN_ENV = "STRATA_ADMIN_TOKEN"
WORKER_LIMIT = 8  # `--workers`' default: one per core, up to this many


def read_admin_token(path: Path | None, settings: StrataSettings | None = None) -> str | None:
    """The admin token: the first line of `path`, else $STRATA_ADMIN_TOKEN (the settings'),
    else None (no AdminService). A file, not a command-line argument, so the secret stays out
    of `ps`."""
    if path is not None:
        path = path.expanduser()
        if not path.is_file():
            raise InputError(f"admin token file not found: {path}")
        lines = path.read_text().strip().splitlines()
        token = lines[0].strip() if lines else ""
        if not token:
            raise InputError(f"admin token file {path} is empty")
        return token
    token = ((settings or load_settings()).admin_token or "").strip()
    return token or None


def server_config(
    settings: StrataSettings,
    *,
    host: str,
    port: int,
    batching: bool,
    max_batch: int,
    max_wait_ms: float,
    max_queue: int,
    grace: float,
    lanes: int,
    metrics_port: int | None,
    metrics_host: str | None,
    http_port: int | None,
    http_host: str | None,
    image_root: Path | None,
    admin_token_file: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
) -> ServerConfig:
    """The server's configuration from `strata serve`'s options; InputError (one line) for a
    missing file, a bad value or a port that cannot be listened on."""
    from service.api.server import ServerConfig

    if image_root is not None and not image_root.expanduser().is_dir():
        raise InputError(f"--image-root is not a folder: {image_root}")
    for what, path in (("certificate", tls_cert), ("key", tls_key)):
        if path is not None and not path.expanduser().is_file():
            raise InputError(f"TLS {what} file not found: {path}")
    values = {
        "host": host,
        "port": port,
        "batching": {
            "enabled": batching,
            "max_batch": max_batch,
            "max_wait_ms": max_wait_ms,
            "max_queue": max_queue,
            "lanes": lanes,
        },
        "grace_s": grace,
        "metrics_port": metrics_port,
        "metrics_host": metrics_host,
        "http_port": http_port,
        "http_host": http_host,
        "image_root": image_root.expanduser() if image_root else None,
        "admin_token": read_admin_token(admin_token_file, settings),
        "tls_cert": tls_cert.expanduser() if tls_cert else None,
        "tls_key": tls_key.expanduser() if tls_key else None,
    }
    config = build_config(ServerConfig, values, "strata serve")  # InputError: one line
    # what a user can get wrong is checked before the bundle and the models load (seconds)
    check_port_free(host, port, "--port")
    if metrics_port is not None:
        check_port_free(metrics_host or host, metrics_port, "--metrics-port")
    if http_port is not None:
        check_port_free(http_host or host, http_port, "--http-port")
    return config


SERVER_DEADLINE_S = 2.0  # a Milvus server's engine call: a request waits on it
LITE_DEADLINE_S = 30.0  # Milvus Lite evaluates a filter in Python (docs/how-to/milvus.md: seconds)


class BackendKind(StrEnum):
    FAISS = "faiss"  # the bundle's own files
    MILVUS = "milvus"  # the Milvus engine `strata index export` wrote the bundle to


@dataclass(frozen=True)
class Backend:
    """`--backend`, parsed once: "faiss", or a Milvus URI (milvus://host:19530, or a Milvus
    Lite file ./file.db, opened by one process only)."""

    kind: BackendKind
    uri: str = ""  # Milvus's

    @classmethod
    def parse(cls, text: str) -> Backend:
        if text == BackendKind.FAISS:
            return cls(BackendKind.FAISS)
        return cls(BackendKind.MILVUS, text)

    @property
    def milvus(self) -> bool:
        return self.kind == BackendKind.MILVUS

    @property
    def lite(self) -> bool:
        """A Milvus Lite file."""
        return self.milvus and self.uri.endswith(".db")

    def __str__(self) -> str:
        return self.uri if self.milvus else self.kind.value


def engine_deadline(backend: Backend) -> float:
    """The default deadline of a Milvus engine call: a Milvus Lite file's, or a server's."""
    return LITE_DEADLINE_S if backend.lite else SERVER_DEADLINE_S


def worker_count(workers: int | None, backend: Backend, cores: int | None = None) -> int:
    """How many server processes `strata serve` runs: `--workers`, else one per core it may use
    (`usable_cores`) up to `WORKER_LIMIT`. A Milvus Lite file is opened by one process only: one
    worker."""
    lite = backend.lite
    if workers is None:
        cores = cores or usable_cores()
        return 1 if lite else max(1, min(cores, WORKER_LIMIT))
    if lite and workers > 1:
        raise InputError(
            f"--workers {workers}: a Milvus Lite file ({backend}) is opened by one process "
            "only; use --workers 1, or a Milvus server (milvus://host:19530)"
        )
    return workers


def cores_of_their_own(
    workers: int, threads: int, cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")
) -> bool:
    """Whether `workers` workers computing on `threads` threads each may hold their threads to
    a core of their own while lightly loaded (service/serving/thread_placement.py): one thread
    each (a worker on more computes on several cores anyway), two cores or more, as many as
    workers at least, all the process's to use. Under a CPU quota below the cores it may run on
    (a container's limit on a shared node), those cores are others' too, and a thread held to
    one would wait while another process uses it."""
    cores = len(os.sched_getaffinity(0))
    quota = cpu_quota(cpu_max)
    return threads == 1 and cores >= 2 and workers <= cores and (quota is None or quota >= cores)


def usable_cores(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """The cores this process may run on (its affinity), or fewer when its cgroup's CPU quota
    allows fewer (a container's CPU limit: "200000 100000" is 2 cores; "max": no limit)."""
    cores = len(os.sched_getaffinity(0))
    quota = cpu_quota(cpu_max)
    return cores if quota is None else max(1, min(cores, math.ceil(quota)))


def cpu_quota(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> float | None:
    """The cgroup's CPU quota in cores ("150000 100000": 1.5), None where there is none."""
    try:
        quota, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


@dataclass(frozen=True)
class ServingConfig:
    """What `strata serve` serves and how, built once from its options and the environment
    (`load_settings`) and handed to the server, its workers (picklable: it crosses into them)
    and the engine."""

    bundles: Path
    backend: Backend
    collection: str  # Milvus: the alias followed
    translator: Path | None
    image_root: Path | None
    device: str  # as the user gave it (auto: CUDA when present), resolved where the engine opens
    batch_size: int
    redis_url: str | None
    redis_prefix: str
    engine_timeout: float
    server: ServerConfig
    mode: str  # how queries are batched, in words (the announcement)


def open_engine(serving: ServingConfig, device: str, cache: QueryCache) -> SearchEngine:
    """The engine `strata serve` serves: the bundle directory's published version over its own
    FAISS files (`backend` "faiss"), or the version a Milvus alias names; `device` resolved."""
    from service.engine.search import EngineConfig, SearchEngine

    bundles, backend, translator = serving.bundles, serving.backend, serving.translator
    image_root, batch_size = serving.image_root, serving.batch_size

    engine_config = EngineConfig(
        image_root=image_root.expanduser().resolve() if image_root else None
    )
    if backend.milvus:
        from indexer.cli.export import require_pymilvus
        from service.engine.milvus.backend import open_milvus

        require_pymilvus()
        if translator is not None:
            raise InputError("--translator serves a local bundle only (--backend faiss)")
        return open_milvus(
            backend.uri,
            bundles,
            serving.collection,
            device=device,
            batch_size=batch_size,
            config=engine_config,
            cache=cache,
            timeout_s=serving.engine_timeout,
        )
    return SearchEngine.open(
        bundles,
        device=device,
        batch_size=batch_size,
        cache=cache,
        translator=translator,
        config=engine_config,
    )


@dataclass
class Announcement:
    """What `strata serve` prints once the server is ready, and the followers of new versions
    it starts then (the Milvus alias, or the Redis version channel)."""

    engine: SearchEngine
    serving: ServingConfig
    cache: QueryCache
    followers: list[AliasFollower] = field(default_factory=list)
    swappers: list[HotSwapper] = field(default_factory=list)

    def ready(self, server: StrataServer) -> None:
        self.cache.report_state()  # strata_redis_up from the start
        for line in self.lines(server):
            typer.echo(line)
        self.follow(server)

    def lines(
        self, server: StrataServer, workers: int = 1, metrics_port: int | None = None
    ) -> list[str]:
        """What `strata serve` prints once serving: `workers` processes share the port, and
        `/metrics` is on `metrics_port` (the pool's, summed) when given, else the server's."""
        engine, config, translator = self.engine, self.serving.server, self.serving.translator
        bundle = engine.bundle
        pool = f"; {workers} workers" if workers > 1 else ""
        lines = [
            f"serving {bundle.path} ({bundle.rows} rows, {bundle.manifest.encoder}, "
            f"{engine.encoder.device if engine.encoder else 'no encoder'}; {self.serving.mode}) "
            f"on {server.address}{pool}; Ctrl-C stops",
        ]
        if engine.encoder is None and engine.missing_encoder is not None:
            lines.append(f"vector queries only: {engine.missing_encoder}")
        if translator is not None and engine.encoder is not None:
            lines.append(f"queries: {engine.encoder.id} (translated by {translator})")
        if config.tls_cert is not None:
            lines.append(f"TLS: certificate {config.tls_cert}")
        metrics_port = metrics_port if metrics_port is not None else server.metrics_port
        if metrics_port is not None:
            where = config.metrics_host or config.host
            lines.append(f"metrics: http://{where}:{metrics_port}/metrics")
        if server.http_address is not None:
            lines.append(f"http: http://{server.http_address}/ (the page; the API under /v1/)")
        if config.admin_token is not None:
            lines.append("admin: strata.v1.AdminService on (bearer token)")
        lines.append(self.cache.describe())
        serving = self.serving
        if serving.backend.milvus:
            lines.append(f"backend: {serving.backend}, following alias {serving.collection}")
        elif serving.redis_url:
            lines.append(f"hot swap: following {serving.redis_prefix}:bundle:versions")
        return lines

    def follow(self, server: StrataServer) -> None:
        """Start following new versions: the Milvus alias, or the Redis version channel."""
        serving = self.serving
        if serving.backend.milvus:
            from service.serving.alias_follower import AliasFollower

            self.followers.append(AliasFollower(server).start())
        elif serving.redis_url:
            from service.serving.hot_swap import HotSwapper

            self.swappers.append(HotSwapper(server, serving.redis_url, serving.redis_prefix))
            self.swappers[0].start()  # on the server's loop


def check_port_free(host: str, port: int, option: str) -> None:
    """InputError when `host:port` cannot be listened on (taken, or not this machine's), found
    by binding a plain socket, so the user hears it at once and without gRPC's core log."""
    if port == 0:
        return
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no obstacle
        try:
            probe.bind(address)
        except OSError as exc:
            taken = exc.errno == errno.EADDRINUSE
            why = "the port is in use (another server?)" if taken else exc.strerror
            raise InputError(
                f"cannot listen on {host}:{port}: {why}; choose another {option}"
            ) from None


def exit_now() -> None:
    """End the process once the server has stopped: output flushed, logging shut down, then
    `os._exit(0)`. The interpreter's own teardown (torch's and gRPC's native state, library
    threads) took 1.2 s more on the 2-core machine — time the shutdown budget (exit within
    --grace + 1 s) does not have, spent on nothing that needs saving."""
    import logging
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(0)
