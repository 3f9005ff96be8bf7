"""strata.v1.AdminService: Reload, Drain and Status, behind a bearer token.

    ServerConfig(admin_token="s3cret")   # registers AdminService; without a token it is absent
    # a call carries the metadata  authorization: Bearer s3cret  (else UNAUTHENTICATED)

`Admin` does the work on a `StrataServer` (plain methods, usable without gRPC);
`AdminServicer` checks the token, converts and maps errors. Reload opens a version of the
server's bundle directory (by name, or the one CURRENT names), verifies it
(`indexer.verify.check_servable`; a version that fails is refused with FAILED_PRECONDITION
naming the file, and counted in `strata_bundle_refused_total{reason}`), loads it on a worker
thread while the old version keeps serving, then hands the new engine to
`StrataServer.swap_engine`.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

from indexer.bundle import MANIFEST, Bundle, parse_version_name, read_current
from indexer.faults import VersionRefusedError
from indexer.verify import check_servable
from service._generated.strata.v1 import admin_pb2 as pb
from service._generated.strata.v1 import admin_pb2_grpc
from service.errors import QueryError, ServiceError, bounded, echo
from service.search import SearchEngine
from training.core.errors import InputError

if TYPE_CHECKING:
    from service.server import StrataServer

log = logging.getLogger(__name__)

BEARER = "bearer "


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

    def __init__(self, server: StrataServer) -> None:
        self.server = server
        self._reloading = asyncio.Lock()

    def open_engine(self, version: str | None) -> SearchEngine:
        """A loaded engine over a version of the server's bundle directory (blocking: run it off
        the event loop), sharing the served engine's encoder, configuration and query cache."""
        root = self.server.bundles_dir
        if version:
            if parse_version_name(version) is None:
                raise QueryError(f"{echo(version)} is not a bundle version name (like v000003)")
            name = version
        else:
            try:
                current = read_current(root)
            except InputError as exc:
                raise ServiceError(str(exc)) from None
            if current is None:
                raise ServiceError(f"{root} has no published bundle (no CURRENT)")
            name = current
        path = root / name
        if not (path / MANIFEST).is_file():
            raise ServiceError(f"no bundle version {name} in {root}")
        served = self.server.engine
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
        """Swap in `version` (a name like "v000003"; None or "": CURRENT's). One at a time."""
        async with self._reloading:
            started = time.perf_counter()
            try:
                engine = await asyncio.to_thread(self.open_engine, version)
            except Exception:
                self.server.metrics.record_hot_swap(False)
                raise
            seconds = time.perf_counter() - started
            previous = self.server.swap_engine(engine)
        return ReloadOutcome(
            previous_version=previous.bundle.version,
            bundle_version=engine.bundle.version,
            bundle_name=engine.bundle.name,
            rows=engine.bundle.rows,
            load_seconds=seconds,
        )

    async def drain(self) -> bool:
        """Health NOT_SERVING from now on; whether the server still reports SERVING (False)."""
        await self.server.drain()
        return not self.server.draining

    def status(self) -> ServerStatus:
        server = self.server
        bundle = server.engine.bundle
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
            hot_swaps=server.hot_swaps,
        )


def bearer_token(metadata: object) -> str | None:
    """The token of an `authorization: Bearer <token>` metadata entry, if any."""
    for key, value in metadata or ():  # type: ignore[attr-defined]
        if key.lower() == "authorization" and isinstance(value, str):
            if value[: len(BEARER)].lower() == BEARER:
                return value[len(BEARER) :].strip()
            return None
    return None


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    """AdminService over `Admin`; every call checks the bearer token first."""

    def __init__(self, admin: Admin, token: str) -> None:
        self.admin = admin
        self._token = token.strip().encode()

    async def _authorize(self, context: grpc.aio.ServicerContext) -> None:
        given = bearer_token(context.invocation_metadata())
        if given is None:
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                "AdminService needs the metadata 'authorization: Bearer <token>'",
            )
        elif not hmac.compare_digest(given.encode(), self._token):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "wrong admin token")

    async def _refuse(self, context: grpc.aio.ServicerContext, error: Exception) -> None:
        if isinstance(error, QueryError):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, bounded(str(error)))
        if isinstance(error, ServiceError):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, bounded(str(error)))
        log.exception("admin call failed", exc_info=error)
        await context.abort(grpc.StatusCode.INTERNAL, bounded(f"internal error: {error}"))

    async def Reload(  # noqa: N802 (gRPC method names)
        self, request: pb.ReloadRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReloadResponse:
        await self._authorize(context)
        version = request.version if request.HasField("version") else None
        try:
            outcome = await self.admin.reload(version)
        except Exception as exc:
            await self._refuse(context, exc)
            raise AssertionError("unreachable: abort raises") from exc
        log.info("admin reload: %s → %s", outcome.previous_version, outcome.bundle_name)
        return pb.ReloadResponse(
            previous_version=outcome.previous_version,
            bundle_version=outcome.bundle_version,
            bundle_name=outcome.bundle_name,
            rows=outcome.rows,
            load_seconds=outcome.load_seconds,
        )

    async def Drain(  # noqa: N802
        self, request: pb.DrainRequest, context: grpc.aio.ServicerContext
    ) -> pb.DrainResponse:
        await self._authorize(context)
        return pb.DrainResponse(serving=await self.admin.drain())

    async def Status(  # noqa: N802
        self, request: pb.StatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.StatusResponse:
        await self._authorize(context)
        status = self.admin.status()
        return pb.StatusResponse(
            serving=status.serving,
            draining=status.draining,
            bundle_version=status.bundle_version,
            bundle_name=status.bundle_name,
            bundle_path=status.bundle_path,
            bundles_dir=status.bundles_dir,
            rows=status.rows,
            encoder=status.encoder,
            queue_depth=status.queue_depth,
            uptime_seconds=status.uptime_seconds,
            hot_swaps=status.hot_swaps,
        )
