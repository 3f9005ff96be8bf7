"""What a serving replica follows: the published version's announcement, and each new one.

`VersionChannel(url, prefix)` reads the keys and the channel that publishing writes
(indexer/versions/publish.py): `current()`, `history()`, `subscribe()` (a `Subscription`, subscribed
when it returns), `listen()` and `alisten()` (asyncio). Connection errors raise PublishError;
reconnecting (with back-off) is the caller's policy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from indexer.versions.publish import (
    DEFAULT_PREFIX,
    SOCKET_TIMEOUT,
    ChannelKeys,
    PublishError,
    one_line,
    parse_announcement,
)
from training.core.redis_connection import (
    async_redis_connection,
    redacted,
    redis_connection,
    redis_errors,
)

POLL = 0.5  # seconds between checks while a subscription waits


class Subscription:
    """Announcements on the channel, from the moment this object exists (sync)."""

    def __init__(self, channel: VersionChannel, idle_timeout: float | None = None) -> None:
        self.channel, self.idle_timeout = channel, idle_timeout
        self._pubsub = channel.client.pubsub(ignore_subscribe_messages=True)
        try:
            self._pubsub.subscribe(channel.keys.channel)
        except redis_errors() as exc:
            raise channel.fail(exc) from None

    def get(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next announcement, or None when `timeout` seconds pass without one (None:
        wait for ever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = POLL if deadline is None else min(POLL, deadline - time.monotonic())
            if wait <= 0:
                return None
            try:
                message = self._pubsub.get_message(ignore_subscribe_messages=True, timeout=wait)
            except redis_errors() as exc:
                raise self.channel.fail(exc) from None
            if message is not None and message.get("type") == "message":
                record = parse_announcement(message.get("data"))
                if record is not None:
                    return record

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Each announcement; ends once `idle_timeout` seconds pass without one."""
        while (record := self.get(self.idle_timeout)) is not None:
            yield record

    def close(self) -> None:
        self._pubsub.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class VersionChannel:
    """What a serving replica follows: the published version, and each new one as announced.

        channel = VersionChannel("redis://redis:6379/0", prefix="strata")
        for record in channel.listen(include_current=True):   # blocks; dedupe by record["name"]
            swap_to(Bundle.open_version(record["path"]).load())

    `include_current` subscribes first and then reads the current key, so no version published
    in between is missed (it may arrive twice: compare names). Connection errors raise
    PublishError; reconnecting (with back-off) is the caller's policy."""

    def __init__(self, url: str, prefix: str = DEFAULT_PREFIX, timeout: float = SOCKET_TIMEOUT):
        self.url, self.keys, self.timeout = url, ChannelKeys(prefix), timeout
        self.client = redis_connection(url, timeout, error=PublishError, decode_responses=True)

    def fail(self, exc: BaseException) -> PublishError:
        return PublishError(f"cannot read Redis at {redacted(self.url)}: {one_line(exc)}")

    def current(self) -> dict[str, Any] | None:
        """The published version's announcement, or None when nothing is published here."""
        try:
            return parse_announcement(self.client.get(self.keys.current))
        except redis_errors() as exc:
            raise self.fail(exc) from None

    def history(self) -> dict[str, dict[str, Any]]:
        """Every version published under this prefix: name → announcement."""
        try:
            raw = self.client.hgetall(self.keys.history)
        except redis_errors() as exc:
            raise self.fail(exc) from None
        parsed = {name: parse_announcement(data) for name, data in raw.items()}
        return {name: record for name, record in sorted(parsed.items()) if record is not None}

    def subscribe(self, idle_timeout: float | None = None) -> Subscription:
        """A subscription that already receives announcements when this returns."""
        return Subscription(self, idle_timeout)

    def listen(
        self, idle_timeout: float | None = None, include_current: bool = False
    ) -> Iterator[dict[str, Any]]:
        """Announcements as they come (first the current version's, with `include_current`);
        ends once `idle_timeout` seconds pass without one (None: never)."""
        with self.subscribe(idle_timeout) as subscription:
            if include_current and (record := self.current()) is not None:
                yield record
            yield from subscription

    async def alisten(
        self, idle_timeout: float | None = None, include_current: bool = False
    ) -> AsyncIterator[dict[str, Any]]:
        """`listen` for asyncio (redis.asyncio): the same records, the same timeout."""
        client = async_redis_connection(self.url, self.timeout)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            try:
                await pubsub.subscribe(self.keys.channel)
                if include_current:
                    record = parse_announcement(await client.get(self.keys.current))
                    if record is not None:
                        yield record
            except redis_errors() as exc:
                raise self.fail(exc) from None
            idle_since = time.monotonic()
            while True:
                if idle_timeout is not None and time.monotonic() - idle_since >= idle_timeout:
                    return
                try:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=POLL)
                except redis_errors() as exc:
                    raise self.fail(exc) from None
                task = asyncio.current_task()  # a cancel that met the read's timeout: stop
                if task is not None and task.cancelling():
                    raise asyncio.CancelledError
                if message is None or message.get("type") != "message":
                    await asyncio.sleep(0)
                    continue
                record = parse_announcement(message.get("data"))
                if record is not None:
                    idle_since = time.monotonic()
                    yield record
        finally:
            await pubsub.aclose()
            await client.aclose()

    def close(self) -> None:
        self.client.close()
