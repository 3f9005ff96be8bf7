"""The one way Strata connects to Redis: a client from a URL, its timeouts, its errors.

    client = redis_connection(url, timeout_s=5.0, error=PublishError, decode_responses=True)
    client = redis_connection(url, timeout_s=0.1, error=QueryCacheError, fail_fast=True)
    client = async_redis_connection(url, timeout_s=5.0)      # redis.asyncio, for a listener
    except redis_errors(): ...                               # what a command may raise

Both socket timeouts (connect and command) are `timeout_s`. `fail_fast` also switches off
redis-py's retries and health checks, for a caller that must never wait on Redis (the query
cache: its circuit breaker decides when to try again). A malformed URL raises `error` (an
InputError of the caller's kind) as one line with the password redacted. redis-py is
imported inside these functions, so that a command without Redis never pays for it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from training.core.errors import InputError

if TYPE_CHECKING:
    import redis
    import redis.asyncio


def redacted(url: str) -> str:
    """The URL without its password, for messages."""
    return re.sub(r"//([^:@/]*):[^@/]*@", r"//\1:***@", url)


def redis_errors() -> tuple[type[BaseException], ...]:
    """What a Redis command raises when Redis is away or refuses (redis-py's and the socket's)."""
    import redis

    return (redis.exceptions.RedisError, OSError)


def redis_connection(
    url: str,
    timeout_s: float,
    *,
    error: type[InputError] = InputError,
    decode_responses: bool = False,
    fail_fast: bool = False,
) -> redis.Redis:
    """A client for `url` (it connects on its first command)."""
    import redis

    options: dict[str, object] = {}
    if fail_fast:
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        options = {"retry": Retry(NoBackoff(), 0), "retry_on_error": [], "health_check_interval": 0}
    try:
        return redis.Redis.from_url(
            url,
            socket_connect_timeout=timeout_s,
            socket_timeout=timeout_s,
            decode_responses=decode_responses,
            **options,
        )
    except ValueError as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise error(f"bad Redis URL {redacted(url)!r}: {reason}") from None


def async_redis_connection(
    url: str, timeout_s: float, *, decode_responses: bool = True
) -> redis.asyncio.Redis:
    """An asyncio client for `url` (redis.asyncio), with the same timeouts."""
    import redis.asyncio as aredis

    return aredis.Redis.from_url(
        url,
        socket_connect_timeout=timeout_s,
        socket_timeout=timeout_s,
        decode_responses=decode_responses,
    )
