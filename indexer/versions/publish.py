"""Publishing a version: the CURRENT pointer file, and with Redis a key, a history and a channel.

Without a Redis URL a version is published by the pointer file alone
(indexer/versions/bundle_store.py).
With one (`--redis-url`, default the environment's `STRATA_REDIS_URL`; keys under
`--redis-prefix`, default `STRATA_REDIS_PREFIX` or "strata"), publishing also writes:

    {prefix}:bundle:current    string: the published version's announcement (JSON, below)
    {prefix}:bundle:history    hash: version name → its announcement, every version published
    {prefix}:bundle:versions   pub/sub channel: each announcement as it is published
    {prefix}:bundle:lock       the publish lock: a random token with a time to live

An announcement: {"version": 7, "name": "v000007", "path": "/abs/BUNDLES/v000007",
"bundles": "/abs/BUNDLES", "created_at": ..., "rows": ..., "manifest_sha256": (of the
version's manifest.json), "published_at": (UTC)}. A replica opens `path` with
`indexer.format.bundle.Bundle.open_version` (the path must be on storage it can read).

The order, and what a failure at each step leaves:

1. before any work, `check()` PINGs Redis: an unreachable or misconfigured Redis fails the job
   at once, one line, nothing written;
2. once the version is written, verified and renamed, the lock is taken (SET NX PX with a
   random token; another job's lock is waited for up to `wait` seconds, then the job fails) —
   so two jobs, on any machines, never publish at once (the local `.lock` flock still guards
   each bundle directory). Unreachable or busy: the job fails BEFORE CURRENT moves; Redis and
   CURRENT are as they were, the version folder stays whole but unpublished
   (`strata index publish BUNDLES --version vN` publishes it later);
3. CURRENT is switched (atomic replace of the pointer file);
4. one Lua script checks the lock still holds our token (a job whose lock expired must not
   overwrite a newer publish), then SETs the current key, HSETs the history and PUBLISHes the
   announcement — atomically. If it fails, CURRENT is switched back to the previous version and
   the job fails: no half-published state either way;
5. the lock is released (a Lua compare-and-delete: only our own token).

A process killed between 3 and 4 leaves CURRENT one version ahead of Redis until the lock's
time to live passes and the next publish (or `strata index publish`) brings Redis level.
CURRENT moves before Redis because replicas follow Redis: they must never be told about a
version the bundle directory does not call current.

Readers subscribe with `VersionChannel(url, prefix)` (indexer/versions/channel.py).
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from indexer.format.manifest import CURRENT, MANIFEST, read_manifest
from indexer.versions.bundle_store import BundleStore
from training.core.errors import InputError
from training.core.files import fsync_dir, sha256_file
from training.core.redis_connection import (
    redacted,
    redis_connection,
    redis_errors,
)

log = logging.getLogger(__name__)

PREFIX_ENVIRONMENT = "STRATA_REDIS_PREFIX"
DEFAULT_PREFIX = "strata"
LOCK_TTL = 60.0  # seconds; the lock is held from before the switch to after the announcement
LOCK_WAIT = 30.0  # seconds a publisher waits for another job's lock
SOCKET_TIMEOUT = 5.0

# KEYS: current, history, lock; ARGV: announcement, version name, channel, lock token
ANNOUNCE_SCRIPT = """
if redis.call('GET', KEYS[3]) ~= ARGV[4] then
  return redis.error_reply('LOSTLOCK the publish lock ' .. KEYS[3] .. ' is no longer ours')
end
local kind = redis.call('TYPE', KEYS[2])['ok']
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' holds a ' .. kind .. ', not a hash')
end
kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a string')
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
return redis.call('PUBLISH', ARGV[3], ARGV[1])
"""
RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class PublishError(InputError):
    """Redis unreachable, misconfigured or busy, or a publish that could not complete."""


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@dataclass(frozen=True)
class ChannelKeys:
    """The Redis names under one prefix."""

    prefix: str = DEFAULT_PREFIX

    @property
    def current(self) -> str:
        return f"{self.prefix}:bundle:current"

    @property
    def history(self) -> str:
        return f"{self.prefix}:bundle:history"

    @property
    def channel(self) -> str:
        return f"{self.prefix}:bundle:versions"

    @property
    def lock(self) -> str:
        return f"{self.prefix}:bundle:lock"


def announcement(path: Path, published_at: str | None = None) -> dict[str, Any]:
    """What is recorded and announced for a version folder."""
    path = path.resolve()
    manifest = read_manifest(path)
    return {
        "version": manifest.version,
        "name": manifest.name,
        "path": str(path),
        "bundles": str(path.parent),
        "created_at": manifest.created_at,
        "rows": manifest.rows,
        "manifest_sha256": sha256_file(path / MANIFEST),
        "published_at": published_at or datetime.now(UTC).isoformat(timespec="seconds"),
    }


def parse_announcement(data: str | bytes | None) -> dict[str, Any] | None:
    """An announcement decoded, or None (logged) when it is not one."""
    if data is None:
        return None
    try:
        record = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("name"), str):
        log.warning("ignoring a message that is not a bundle announcement: %.80r", data)
        return None
    return record


class Publisher(Protocol):
    """Where a version is announced beyond the pointer file (RedisPublisher)."""

    def describe(self) -> str: ...

    def check(self) -> None:
        """Fail (PublishError) unless publishing can work; called before any work."""
        ...

    def locked(self) -> AbstractContextManager[str]:
        """Hold the publish lock across machines; yields the token `announce` checks."""
        ...

    def announce(self, record: dict[str, Any], token: str) -> int: ...


class RedisPublisher:
    """Records and announces published versions in Redis (see the module docstring)."""

    def __init__(
        self,
        url: str,
        prefix: str = DEFAULT_PREFIX,
        wait: float = LOCK_WAIT,
        lock_ttl: float = LOCK_TTL,
        timeout: float = SOCKET_TIMEOUT,
    ) -> None:
        if not prefix:
            raise PublishError("the Redis key prefix must not be empty")
        self.url, self.keys, self.wait, self.lock_ttl = url, ChannelKeys(prefix), wait, lock_ttl
        self.client = redis_connection(url, timeout, error=PublishError, decode_responses=True)

    def describe(self) -> str:
        return f"{redacted(self.url)} key {self.keys.current}, channel {self.keys.channel}"

    def _fail(self, doing: str, exc: BaseException) -> PublishError:
        return PublishError(f"cannot {doing} Redis at {redacted(self.url)}: {one_line(exc)}")

    def check(self) -> None:
        try:
            self.client.ping()
        except redis_errors() as exc:
            raise self._fail("reach", exc) from None

    @contextmanager
    def locked(self) -> Iterator[str]:
        """Hold the publish lock (yields its token); PublishError if it cannot be had."""
        token = secrets.token_hex(16)
        deadline = time.monotonic() + self.wait
        waiting = False
        try:
            while not self.client.set(
                self.keys.lock, token, nx=True, px=max(1, int(self.lock_ttl * 1000))
            ):
                if not waiting:
                    waiting = True
                    log.info(
                        "the publish lock %s is held by another job; waiting up to %g s",
                        self.keys.lock,
                        self.wait,
                    )
                if time.monotonic() >= deadline:
                    holder = self.client.pttl(self.keys.lock)
                    raise PublishError(
                        f"another job is publishing to {redacted(self.url)} (lock "
                        f"{self.keys.lock} held, expires in {max(holder, 0) / 1000:.0f} s); "
                        f"waited {self.wait:g} s"
                    )
                time.sleep(0.05)
        except redis_errors() as exc:
            raise self._fail("reach", exc) from None
        try:
            yield token
        finally:
            try:
                self.client.eval(RELEASE_SCRIPT, 1, self.keys.lock, token)
            except redis_errors() as exc:  # it expires on its own
                log.warning("could not release the publish lock %s: %s", self.keys.lock, exc)

    def announce(self, record: dict[str, Any], token: str) -> int:
        """SET current, HSET history, PUBLISH — atomically, if the lock is still ours.
        Returns how many subscribers received the announcement."""
        keys = self.keys
        payload = json.dumps(record, sort_keys=True)
        try:
            return int(
                self.client.eval(
                    ANNOUNCE_SCRIPT,
                    3,
                    keys.current,
                    keys.history,
                    keys.lock,
                    payload,
                    record["name"],
                    keys.channel,
                    token,
                )
            )
        except redis_errors() as exc:
            raise self._fail("announce the version in", exc) from None


def unpublish(store: BundleStore, previous: str | None) -> None:
    """Point CURRENT back at `previous` (or remove it when there was none)."""
    if previous is not None:
        store.switch(previous)
    else:
        (store.root / CURRENT).unlink(missing_ok=True)
        fsync_dir(store.root)


def publish_version(
    store: BundleStore, name: str, publisher: Publisher | None = None
) -> str | None:
    """Make version `name` the published one: CURRENT, and with a publisher Redis too (steps
    2–5 of the module docstring). Returns where it was announced, None for the pointer alone.
    On failure CURRENT still names what it named before."""
    if publisher is None:
        store.switch(name)
        return None
    record = announcement(store.root / name)
    previous = store.current()
    try:
        with publisher.locked() as token:
            store.switch(name)
            try:
                publisher.announce(record, token)
            except BaseException:
                unpublish(store, previous)
                raise
    except PublishError as exc:
        still = f"CURRENT still names {previous}" if previous else "nothing is published"
        raise PublishError(f"{str(exc).rstrip('.')}; {name} was not published ({still})") from None
    return publisher.describe()
