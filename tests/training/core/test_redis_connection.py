"""The one Redis client: timeouts, fail-fast mode, one-line URL errors with the password hidden."""

from __future__ import annotations

import asyncio

import pytest

from training.core.errors import InputError
from training.core.redis_connection import (
    async_redis_connection,
    redacted,
    redis_connection,
    redis_errors,
)

URL = "redis://127.0.0.1:6379/0"


class KindError(InputError):
    """A caller's own error kind."""


def test_redacted_hides_only_the_password():
    assert redacted("redis://user:pw@host:6379/0") == "redis://user:***@host:6379/0"
    assert redacted("redis://host:6379/0") == "redis://host:6379/0"


def test_a_bad_url_is_one_line_of_the_callers_kind():
    with pytest.raises(KindError, match=r"^bad Redis URL 'http://u:\*\*\*@h:6379'") as caught:
        redis_connection("http://u:secret@h:6379", 1.0, error=KindError)
    assert "\n" not in str(caught.value) and "secret" not in str(caught.value)


def test_clients_carry_the_timeouts_and_the_mode():
    plain = redis_connection(URL, 2.5, decode_responses=True)
    kwargs = plain.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == 2.5
    assert kwargs["decode_responses"] is True
    fast = redis_connection(URL, 0.1, fail_fast=True)
    kwargs = fast.connection_pool.connection_kwargs
    assert kwargs["health_check_interval"] == 0 and kwargs["decode_responses"] is False
    assert fast.ping() and plain.ping()
    plain.close()
    fast.close()


def test_an_unreachable_redis_raises_one_of_redis_errors():
    client = redis_connection("redis://127.0.0.1:1/0", 0.1, fail_fast=True)
    with pytest.raises(redis_errors()):
        client.ping()


def test_the_async_client_answers():
    async def ping() -> bool:
        client = async_redis_connection(URL, 2.0)
        try:
            return bool(await client.ping())
        finally:
            await client.aclose()

    assert asyncio.run(ping())
