"""Hot swap: follow the bundle-version channel and serve each newly published version, with no
failed request.

    swapper = HotSwapper(server, "redis://redis:6379/0", prefix="strata")
    swapper.start()                     # on the server's event loop (or start(loop) from outside)
    ...
    await swapper.stop()                # or swapper.close() from another thread

What `strata index build | add | delete | publish --redis-url` announce
(indexer/versions/publish.py:
`{prefix}:bundle:versions`, and the `{prefix}:bundle:current` key) is followed here:

1. listen: `VersionChannel.alisten(include_current=True)` — subscribed first, then the current
   key read, so no version published meanwhile is missed; besides, the current key is polled
   every `poll_s` seconds (a version announced while the subscription was reconnecting);
2. decide (`VersionTracker`, pure): each version name is considered once; a version not newer
   than the one served is ignored (a re-publish of an older version — a rollback — is not
   followed: use the AdminService's Reload, or restart); of several waiting, only the newest
   is loaded;
3. load OFF the event loop (a daemon thread, so that a load still running when the server
   stops never delays its exit: service/serving/daemon_work.py): `Bundle.open_version(path)`, its
   manifest's sha256 checked against the announcement's, the version verified
   (`indexer.verify.check.check_servable`: every file's size and checksum, row counts, indexes,
   postings, ids, artifacts, prefix cross-checks — what `strata index verify` checks but the
   cache sample), its encoder checked to be the served bundle's, then a new `SearchEngine`
   (everything loaded, see `Bundle.load`) sharing the served engine's encoder, config and
   query cache;
4. swap on the event loop: `StrataServer.swap_engine(new)`, the one place the served engine
   changes, replaces it for the calls that start afterwards. A call already running — a
   BatchSearch between two of its chunks too — finishes on the old engine, which it leased
   when it started (service/serving/served_engine.py); the old version is released when the last of
   those calls ends — no request fails, none waits for the load, none mixes two versions.

A load that fails (a missing or unreadable folder, a different encoder, a manifest that is not
the announced one, a version that does not verify) is logged and counted
(`strata_hot_swaps_total{result="failed"}`, and for a refused version
`strata_bundle_refused_total{reason}`); the served version stays. When Redis goes away the
subscription raises `PublishError`: serving goes on unchanged, and the listener resubscribes
with back-off (`backoff_s` doubling to `max_backoff_s`), reading the current key again.
`state()` says what is served, whether Redis answers, and the counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexer.format.bundle import Bundle
from indexer.format.manifest import MANIFEST, BundleError, parse_version_name
from indexer.verify.check import check_servable
from indexer.verify.faults import Fault, VersionRefusedError
from indexer.versions.channel import VersionChannel
from indexer.versions.publish import DEFAULT_PREFIX, PublishError, one_line
from service.engine.search import SearchEngine
from service.errors import ServiceError
from service.serving.daemon_work import on_daemon_thread
from service.serving.served_engine import EngineHost
from training.core.errors import InputError
from training.core.files import sha256_file
from training.core.redis_connection import redacted

log = logging.getLogger(__name__)

DEFAULT_BACKOFF_S = 0.5
DEFAULT_MAX_BACKOFF_S = 10.0
DEFAULT_POLL_S = 30.0
CHANNEL_TIMEOUT_S = 5.0
HISTORY = 100  # swap events kept for `state()`

EngineLoader = Callable[[dict[str, Any], SearchEngine], SearchEngine]


class SwapError(ServiceError):
    """An announced version that cannot be served (the served one stays)."""


# --- pure parts ----------------------------------------------------------------------------------


def record_version(record: dict[str, Any]) -> int | None:
    """The version number of an announcement (its `version`, else parsed from its `name`)."""
    version = record.get("version")
    if isinstance(version, int) and not isinstance(version, bool):
        return version
    name = record.get("name")
    return parse_version_name(name) if isinstance(name, str) else None


class VersionTracker:
    """Which announced versions to load: each name once, only newer than the one served."""

    def __init__(self, served_name: str, served_version: int) -> None:
        self.served_name, self.served_version = served_name, served_version
        self.seen: set[str] = {served_name}

    def skip_reason(self, record: dict[str, Any]) -> str | None:
        """None: load it; else why not ("malformed", "duplicate", "older")."""
        name, version = record.get("name"), record_version(record)
        if not isinstance(name, str) or version is None or not record.get("path"):
            return "malformed"
        if name in self.seen:
            return "duplicate"
        if version <= self.served_version:
            return "older"
        return None

    def choose(self, records: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The newest record worth loading among those waiting (the others are marked seen)."""
        wanted = [r for r in records if self.skip_reason(r) is None]
        for record in wanted:
            self.seen.add(record["name"])
        return max(wanted, key=lambda r: record_version(r) or 0, default=None)

    def served(self, record: dict[str, Any]) -> None:
        self.served_name, self.served_version = record["name"], record_version(record) or 0


@dataclass
class SwapEvent:
    name: str
    result: str  # "ok" | "failed"
    seconds: float
    error: str | None = None


@dataclass
class SwapCounts:
    swaps: int = 0
    failures: int = 0
    announcements: int = 0
    decided: int = 0  # announcements the swap worker is done with: loaded, failed or skipped
    reconnects: int = 0
    events: list[SwapEvent] = field(default_factory=list)


# --- loading (blocking: runs on a worker thread) -------------------------------------------------


def load_engine(record: dict[str, Any], current: SearchEngine) -> SearchEngine:
    """The announced version as a new engine sharing `current`'s encoder, config and cache."""
    try:
        bundle = Bundle.open_version(record["path"])
    except BundleError as exc:  # no manifest (partly written, or gone), or not one
        path = Path(record["path"])
        raise VersionRefusedError(path, [Fault("manifest", str(exc))]) from None
    if bundle.name != record["name"]:
        raise SwapError(f"{record['path']} holds {bundle.name}, not the announced {record['name']}")
    expected = record.get("manifest_sha256")
    if expected and sha256_file(bundle.path / MANIFEST) != expected:
        fault = Fault("manifest", f"{MANIFEST}: not the manifest announced for {bundle.name}")
        raise VersionRefusedError(bundle.path, [fault])
    check_servable(bundle.path)
    spec, served = bundle.manifest.encoder, current.bundle.manifest.encoder
    if spec != served:
        raise SwapError(
            f"{bundle.name} was embedded with {spec!r}, the served bundle with {served!r}: "
            "restart the server to switch encoders"
        )
    return current.with_bundle(bundle.load())


# --- the follower (asyncio) ----------------------------------------------------------------------


class HotSwapper:
    """Follows `{prefix}:bundle:versions` at `url`, swapping `server`'s engine (see above)."""

    def __init__(
        self,
        server: EngineHost,
        url: str,
        prefix: str = DEFAULT_PREFIX,
        *,
        loader: EngineLoader = load_engine,
        backoff_s: float = DEFAULT_BACKOFF_S,
        max_backoff_s: float = DEFAULT_MAX_BACKOFF_S,
        poll_s: float = DEFAULT_POLL_S,
        timeout_s: float = CHANNEL_TIMEOUT_S,
    ) -> None:
        if not prefix:
            raise PublishError("the Redis key prefix must not be empty")
        self.server, self.url, self.loader = server, url, loader
        self.channel = VersionChannel(url, prefix, timeout_s)  # PublishError: a bad URL
        self.backoff_s, self.max_backoff_s, self.poll_s = backoff_s, max_backoff_s, poll_s
        bundle = server.served.engine.bundle
        self.tracker = VersionTracker(bundle.name, bundle.version)
        self.counts = SwapCounts()
        self.connected = False
        self.last_error: str | None = None
        self._pending: asyncio.Queue[dict[str, Any]] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- life cycle ---

    def start(self, loop: asyncio.AbstractEventLoop | None = None, timeout: float = 10.0) -> None:
        """Start following: on the running loop, or on `loop` (the server's) from any thread."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or loop is running:
            self._start_tasks()
            return
        asyncio.run_coroutine_threadsafe(self._astart(), loop).result(timeout)

    async def _astart(self) -> None:
        self._start_tasks()

    def _start_tasks(self) -> None:
        if self._tasks:
            raise RuntimeError("the hot swapper is already running")
        self._loop = asyncio.get_running_loop()
        self._pending = asyncio.Queue()
        self._tasks = [
            self._loop.create_task(self._listen(), name="strata-swap-listen"),
            self._loop.create_task(self._poll(), name="strata-swap-poll"),
            self._loop.create_task(self._swap_worker(), name="strata-swap-worker"),
        ]
        log.info(
            "following bundle versions on %s (%s)", redacted(self.url), self.channel.keys.channel
        )

    async def stop(self) -> None:
        """Stop following (a load in progress is abandoned; the served engine stays)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.channel.close()

    def close(self, timeout: float = 10.0) -> None:
        """`stop` from another thread than the loop's."""
        if self._loop is None or self._loop.is_closed() or not self._tasks:
            self.channel.close()
            return
        asyncio.run_coroutine_threadsafe(self.stop(), self._loop).result(timeout)

    # --- state ---

    def state(self) -> dict[str, Any]:
        return {
            "served": self.tracker.served_name,
            "served_version": self.tracker.served_version,
            "redis": "connected" if self.connected else "disconnected",
            "swaps": self.counts.swaps,
            "failures": self.counts.failures,
            "announcements": self.counts.announcements,
            "reconnects": self.counts.reconnects,
            "last_error": self.last_error,
        }

    def _set_connected(self, up: bool, reason: str | None = None) -> None:
        if up and not self.connected:
            if self.last_error is not None:
                self.counts.reconnects += 1
                log.warning("bundle-version channel at %s answers again", redacted(self.url))
        elif not up and self.connected:
            log.warning("bundle-version channel lost (%s); serving on, reconnecting", reason)
        self.connected = up

    # --- tasks ---

    def _offer(self, record: dict[str, Any]) -> None:
        self.counts.announcements += 1
        assert self._pending is not None
        self._pending.put_nowait(record)

    async def _listen(self) -> None:
        backoff = self.backoff_s
        while True:
            try:
                async for record in self.channel.alisten(include_current=True):
                    self._set_connected(True)
                    backoff = self.backoff_s
                    self._offer(record)
            except PublishError as exc:
                self.last_error = str(exc)
                self._set_connected(False, str(exc))
            except Exception as exc:  # never let the listener die: log, back off, resubscribe
                self.last_error = one_line(exc)
                self._set_connected(False, self.last_error)
                log.exception("bundle-version listener failed")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.max_backoff_s)

    async def _poll(self) -> None:
        while True:
            try:
                record = await asyncio.to_thread(self.channel.current)
            except PublishError as exc:
                self.last_error = str(exc)
                self._set_connected(False, str(exc))
            except Exception:  # keep polling whatever happened
                log.exception("reading the current bundle version failed")
            else:
                self._set_connected(True)
                if record is not None:
                    self._offer(record)
            await asyncio.sleep(self.poll_s)

    async def _swap_worker(self) -> None:
        assert self._pending is not None
        while True:
            waiting = [await self._pending.get()]
            while not self._pending.empty():
                waiting.append(self._pending.get_nowait())
            served = self.server.served.engine.bundle  # an admin Reload may have swapped meanwhile
            self.tracker.served_name, self.tracker.served_version = served.name, served.version
            record = self.tracker.choose(waiting)
            if record is not None:
                await self._swap_to(record)
            self.counts.decided += len(waiting)

    async def _swap_to(self, record: dict[str, Any]) -> None:
        name = record["name"]
        started = time.perf_counter()
        try:
            served = self.server.served.engine  # loaded on a daemon thread: never delays exit
            engine = await on_daemon_thread(lambda: self.loader(record, served), "strata-swap")
            self.server.swap_engine(engine)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            seconds = time.perf_counter() - started
            self.counts.failures += 1
            self._event(SwapEvent(name, "failed", seconds, one_line(exc)))
            self.server.metrics.record_hot_swap(False)  # successes: swap_engine counts them
            if isinstance(exc, VersionRefusedError):
                self.server.metrics.record_refusal(exc.reason)
            log.error(
                "could not swap to %s (%s): %s; still serving %s",
                name,
                record.get("path"),
                one_line(exc),
                self.tracker.served_name,
                exc_info=not isinstance(exc, InputError),  # a surprise: its traceback
            )
            return
        previous = self.tracker.served_name
        self.tracker.served(record)
        self.counts.swaps += 1
        seconds = time.perf_counter() - started
        self._event(SwapEvent(name, "ok", seconds))
        log.info("swapped %s -> %s in %.2f s (loaded off the event loop)", previous, name, seconds)

    def _event(self, event: SwapEvent) -> None:
        self.counts.events.append(event)
        del self.counts.events[:-HISTORY]
