"""strata.v1.AdminService: Reload, Drain and Status, behind a bearer token.

    ServerConfig(admin_token="s3cret")   # registers AdminService; without a token it is absent
    # a call carries the metadata  authorization: Bearer s3cret  (else UNAUTHENTICATED)

`Admin` does the work on a running server (plain methods, usable without gRPC; the server is
anything with the `OperatedServer` surface — `StrataServer` is); `AdminServicer` only converts.
The token is checked by `service.api.grpc.admin_auth.AdminAuthInterceptor`, errors become
statuses in `service.api.grpc.rpc_errors.ErrorStatusInterceptor`. Reload opens a version of the
server's bundle directory (by name, or the one CURRENT names), verifies it
(`indexer.verify.check.check_servable`;
a version that fails is refused with FAILED_PRECONDITION naming the file, and counted in
`strata_bundle_refused_total{reason}`), loads it on a daemon thread (service/serving/daemon_work.py:
a reload still running when the server stops never delays its exit) while the old version
keeps serving, then hands the new engine to `StrataServer.swap_engine`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc

from indexer.format.bundle import Bundle
from indexer.format.manifest import MANIFEST, parse_version_name, read_current
from indexer.verify.check import check_servable
from indexer.verify.faults import VersionRefusedError
from service._generated.strata.v1 import admin_pb2 as pb
from service._generated.strata.v1 import admin_pb2_grpc
from service.engine.search import SearchEngine
from service.errors import QueryError, ServiceError, echo
from service.serving.batching import MicroBatcher
from service.serving.daemon_work import on_daemon_thread
from service.serving.served_engine import EngineHost
from training.core.errors import InputError

log = logging.getLogger(__name__)

DRAIN_POLL_S = 0.002  # how often a pool worker's Reload looks whether the old version's calls ended


class PoolPeers(Protocol):
    """How a worker of a pool asks every worker (itself included) to act: service/serving/
    pool_worker.py's `PoolLink`. `ask` answers each worker's payload, by worker index."""

    index: int

    async def ask(self, action: str, argument: str | None) -> list[dict[str, Any]]: ...


class OperatedServer(EngineHost, Protocol):
    """What the operator's actions read and change on a running server."""

    batcher: MicroBatcher
    pool: PoolPeers | None
    serving: bool
    draining: bool
    started_at: float

    @property
    def bundles_dir(self) -> Path: ...

    async def drain(self) -> None: ...


@dataclass(frozen=True)
class ReloadOutcome:
    previous_version: int
    bundle_version: int
    bundle_name: str
    rows: int
    load_seconds: float


@dataclass(frozen=True)
class ServerStatus:
    serving: bool
    draining: bool
    bundle_version: int
    bundle_name: str
    bundle_path: str
    bundles_dir: str
    rows: int
    encoder: str
    queue_depth: int
    uptime_seconds: float
    hot_swaps: int


class Admin:
    """The operator's actions on one running server."""

    def __init__(self, server: OperatedServer) -> None:
        self.server = server
        self._reloading = asyncio.Lock()

    def version_name(self, version: str | None) -> str:
        """The version a Reload of `version` loads: the name itself, checked, or CURRENT's."""
        if version:
            if parse_version_name(version) is None:
                raise QueryError(f"{echo(version)} is not a bundle version name (like v000003)")
            return version
        root = self.server.bundles_dir
        try:
            current = read_current(root)
        except InputError as exc:
            raise ServiceError(str(exc)) from None
        if current is None:
            raise ServiceError(f"{root} has no published bundle (no CURRENT)")
        return current

    def open_engine(self, version: str | None) -> SearchEngine:
        """A loaded engine over a version of the server's bundle directory (blocking: run it off
        the event loop), sharing the served engine's encoder, configuration and query cache."""
        root = self.server.bundles_dir
        name = self.version_name(version)
        path = root / name
        if not (path / MANIFEST).is_file():
            raise ServiceError(f"no bundle version {name} in {root}")
        served = self.server.served.engine
        try:
            check_servable(path)
        except VersionRefusedError as exc:
            self.server.metrics.record_refusal(exc.reason)
            raise ServiceError(str(exc)) from None
        try:
            bundle = Bundle.open_version(path)
            if bundle.manifest.encoder != served.bundle.manifest.encoder:
                raise ServiceError(
                    f"bundle {name} was embedded with {bundle.manifest.encoder!r}; the server "
                    f"embeds queries with {served.bundle.manifest.encoder!r}: restart to switch"
                )
            return served.with_bundle(bundle)  # its encoder, config and query cache
        except ServiceError:
            raise
        except InputError as exc:
            raise ServiceError(f"cannot serve {path}: {exc}") from None

    async def reload(self, version: str | None = None) -> ReloadOutcome:
        """Swap in `version` (a name like "v000003"; None or "": CURRENT's). One at a time. In a
        worker of a pool, every worker swaps to the same version (CURRENT is read once, here), and
        the answer comes once the last of them serves it alone (service/cli/pool/parent.py)."""
        pool = self.server.pool
        if pool is None:
            return await self.reload_here(version)
        name = self.version_name(version)
        outcomes = [ReloadOutcome(**fields) for fields in await pool.ask("reload", name)]
        mine = outcomes[pool.index] if pool.index < len(outcomes) else outcomes[0]
        return dataclasses.replace(mine, load_seconds=max(o.load_seconds for o in outcomes))

    async def reload_here(self, version: str | None, drained: bool = False) -> ReloadOutcome:
        """Reload in this process alone; `drained`: return only once no call still answers from
        the version swapped out (what a pool's Reload waits for in each worker)."""
        async with self._reloading:
            started = time.perf_counter()
            try:
                engine = await on_daemon_thread(  # never delays the server's exit
                    lambda: self.open_engine(version), "strata-reload"
                )
            except Exception:
                self.server.metrics.record_hot_swap(False)
                raise
            seconds = time.perf_counter() - started
            previous = self.server.swap_engine(engine)
            while drained and self.server.served.leases(previous):
                await asyncio.sleep(DRAIN_POLL_S)  # calls that leased it are finishing
        return ReloadOutcome(
            previous_version=previous.bundle.version,
            bundle_version=engine.bundle.version,
            bundle_name=engine.bundle.name,
            rows=engine.bundle.rows,
            load_seconds=seconds,
        )

    async def drain(self) -> bool:
        """Health NOT_SERVING from now on (in every worker of a pool); whether the server still
        reports SERVING (False)."""
        if self.server.pool is not None:
            await self.server.pool.ask("drain", None)
        else:
            await self.server.drain()
        return not self.server.draining

    def status(self) -> ServerStatus:
        server = self.server
        bundle = server.served.engine.bundle
        return ServerStatus(
            serving=server.serving,
            draining=server.draining,
            bundle_version=bundle.version,
            bundle_name=bundle.name,
            bundle_path=str(bundle.path),
            bundles_dir=str(server.bundles_dir),
            rows=bundle.rows,
            encoder=bundle.manifest.encoder or "",
            queue_depth=server.batcher.waiting,
            uptime_seconds=time.monotonic() - server.started_at,
            hot_swaps=server.served.swaps,
        )


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    """AdminService over `Admin` (behind `AdminAuthInterceptor` and `ErrorStatusInterceptor`)."""

    def __init__(self, admin: Admin) -> None:
        self.admin = admin

    async def Reload(  # noqa: N802 (gRPC method names)
        self, request: pb.ReloadRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReloadResponse:
        version = request.version if request.HasField("version") else None
        outcome = await self.admin.reload(version)
        log.info("admin reload: %s → %s", outcome.previous_version, outcome.bundle_name)
        return pb.ReloadResponse(**asdict(outcome))  # the same fields, by name

    async def Drain(  # noqa: N802
        self, request: pb.DrainRequest, context: grpc.aio.ServicerContext
    ) -> pb.DrainResponse:
        return pb.DrainResponse(serving=await self.admin.drain())

    async def Status(  # noqa: N802
        self, request: pb.StatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.StatusResponse:
        return pb.StatusResponse(**asdict(self.admin.status()))  # the same fields, by name
