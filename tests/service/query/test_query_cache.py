"""The query-embedding cache: its key, its LRU and breaker, and the engine with it — locally and
through the real Redis (127.0.0.1:6379, or STRATA_TEST_REDIS_URL), each test under its own key
prefix, removed after."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from serving_helpers import REDIS_URL as URL
from serving_helpers import CountingEncoder
from waiting import WAIT_S, wait_for

from indexer.format.bundle import Bundle
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.query.cache import (
    CONNECTED,
    DISABLED,
    DISCONNECTED,
    LocalLRU,
    QueryCache,
    QueryCacheError,
)
from service.query.keys import cache_key
from service.results import SearchQuery
from service.serving.metrics import ServerMetrics

UNREACHABLE = "redis://127.0.0.1:1/0"


@pytest.fixture
def caches() -> Iterator[list[QueryCache]]:
    """Caches made by a test, closed after it."""
    made: list[QueryCache] = []
    yield made
    for cache in made:
        cache.close()


def engine_with(text_bundle: Path, minilm: Any, cache: QueryCache) -> SearchEngine:
    return SearchEngine(Bundle.open(text_bundle), CountingEncoder(minilm), cache=cache)


def hits(engine: SearchEngine, text: str) -> list[tuple[str, float]]:
    result = engine.search(SearchQuery.of(text, k=5))
    return [(h.id, round(h.score, 5)) for h in result.hits]


# --- pure parts ----------------------------------------------------------------------------------


def test_the_lru_keeps_the_most_recently_used_entries():
    lru = LocalLRU(size=2)
    lru.put("a", np.zeros(3))
    lru.put("b", np.ones(3))
    assert lru.get("a") is not None  # a is now the most recent
    lru.put("c", np.full(3, 2.0))
    assert lru.get("b") is None and lru.get("a") is not None and len(lru) == 2
    copy = lru.get("c")
    assert copy is not None
    copy[:] = 9  # callers get copies: the cached row is unchanged
    np.testing.assert_array_equal(lru.get("c"), np.full(3, 2.0, dtype=np.float32))
    with pytest.raises(QueryCacheError, match="at least 1 entry"):
        LocalLRU(size=0)


# --- the engine with a local cache --------------------------------------------------------------


def test_a_repeated_query_is_not_embedded_again(text_bundle: Path, minilm, caches):
    caches.append(cache := QueryCache(size=64))
    engine = engine_with(text_bundle, minilm, cache)
    encoder = engine.encoder
    first = hits(engine, "a red dog")
    assert encoder.calls == 1 and encoder.texts == ["a red dog"]
    again = hits(engine, "  A RED   dog ")
    assert encoder.calls == 1  # same query after normalisation: the cache answered
    assert again == first
    assert cache.stats()["local"] == {"hits": 1, "misses": 1}
    assert cache.redis_state == DISABLED

    # a batch: the cached query is not embedded, the two spellings of a new one once
    results = engine.search_batch(
        [SearchQuery.of(t, k=5) for t in ("a red dog", "a blue car", "A Blue  Car", "a cat")]
    )
    assert encoder.calls == 2 and encoder.texts[1:] == ["a blue car", "a cat"]
    assert [h.id for h in results[1].hits] == [h.id for h in results[2].hits]
    plain = SearchEngine(Bundle.open(text_bundle), minilm)  # no cache: the same answers
    assert hits(plain, "a blue car") == [(h.id, round(h.score, 5)) for h in results[1].hits]


# --- Redis -------------------------------------------------------------------------------------


def test_a_second_engine_gets_what_the_first_embedded_from_redis(
    text_bundle: Path, minilm, prefix: str, caches
):
    caches.append(first_cache := QueryCache(redis_url=URL, prefix=prefix))
    assert first_cache.redis_state == CONNECTED
    first = engine_with(text_bundle, minilm, first_cache)
    expected = hits(first, "a man riding a horse")
    assert first_cache.stats()["redis"]["misses"] == 1
    assert first_cache.stats()["redis"]["stored"] == 1

    key = first_cache.redis_key(cache_key("minilm", "a man riding a horse"))
    client = redis.Redis.from_url(URL)
    assert client.strlen(key) == 384 * 4
    assert 0 < client.pttl(key) <= 24 * 3600 * 1000
    client.close()

    caches.append(second_cache := QueryCache(redis_url=URL, prefix=prefix))  # another replica
    second = engine_with(text_bundle, minilm, second_cache)
    assert hits(second, "A man riding a HORSE") == expected
    assert second.encoder.calls == 0  # embedded by the first engine, read from Redis
    stats = second_cache.stats()
    assert stats["local"]["misses"] == 1 and stats["redis"]["hits"] == 1
    hits(second, "a man riding a horse")
    assert second_cache.stats()["local"]["hits"] == 1  # copied into the LRU on the way


def test_redis_entries_expire_after_their_ttl(text_bundle: Path, minilm, prefix: str, caches):
    caches.append(writer := QueryCache(redis_url=URL, prefix=prefix, ttl_s=0.5))
    engine = engine_with(text_bundle, minilm, writer)
    hits(engine, "two children in the snow")
    key = writer.redis_key(cache_key("minilm", "two children in the snow"))
    client = redis.Redis.from_url(URL)
    assert writer.stats()["redis"]["stored"] == 1
    remaining = client.pttl(key)  # -1: no expiry; -2: already expired (a slow machine)
    assert remaining <= 500 and remaining != -1, remaining
    wait_for(lambda: client.exists(key) == 0, WAIT_S, "the entry's expiry")
    client.close()
    caches.append(reader := QueryCache(redis_url=URL, prefix=prefix, ttl_s=0.5))
    later = engine_with(text_bundle, minilm, reader)
    hits(later, "two children in the snow")
    assert later.encoder.calls == 1 and reader.stats()["redis"]["misses"] == 1


def test_a_redis_value_of_the_wrong_size_is_recomputed(
    text_bundle: Path, minilm, prefix: str, caches
):
    caches.append(cache := QueryCache(redis_url=URL, prefix=prefix))
    key = cache.redis_key(cache_key("minilm", "a yellow bird"))
    client = redis.Redis.from_url(URL)
    client.set(key, b"\x00" * (128 * 4), px=60_000)  # a 128-d row: not this encoder's
    engine = engine_with(text_bundle, minilm, cache)
    hits(engine, "a yellow bird")
    assert engine.encoder.calls == 1
    assert cache.stats()["redis"]["rejected"] == 1
    assert client.strlen(key) == 384 * 4  # overwritten with the right row
    client.close()


def test_an_unreachable_redis_costs_nothing_and_serves_on(text_bundle: Path, minilm, caches):
    caches.append(cache := QueryCache(redis_url=UNREACHABLE, prefix="x", backoff_s=60))
    assert cache.redis_state == DISCONNECTED
    engine = engine_with(text_bundle, minilm, cache)
    first = hits(engine, "a dog on the beach")
    assert hits(engine, "a dog on the beach") == first
    stats = cache.stats()
    assert stats["redis"]["skipped"] == 1  # the breaker is open: Redis not even tried
    assert stats["local"] == {"hits": 1, "misses": 1} and engine.encoder.calls == 1


def test_the_cache_feeds_the_server_metrics(text_bundle: Path, minilm, prefix: str, caches):
    metrics = ServerMetrics()
    caches.append(cache := QueryCache(redis_url=URL, prefix=prefix, metrics=metrics))
    engine = SearchEngine(Bundle.open(text_bundle), minilm, cache=cache)
    with (
        BackgroundServer(engine, ServerConfig(port=0), metrics=metrics) as server,
        StrataClient(server.target) as client,
    ):
        client.search("a green tree", k=3)
        client.search("A green TREE", k=3)
        registry = server.server.metrics.registry

        def requests(tier: str, result: str) -> float | None:
            labels = {"tier": tier, "result": result}
            return registry.get_sample_value("strata_query_cache_requests_total", labels)

        assert (requests("local", "hit"), requests("local", "miss")) == (1, 1)
        assert (requests("redis", "hit"), requests("redis", "miss")) == (0, 1)
        assert registry.get_sample_value("strata_redis_up") == 1


def test_bad_cache_settings_are_one_line_errors(monkeypatch, capsys, tmp_path: Path):
    with pytest.raises(QueryCacheError, match=r"^bad Redis URL 'http://h:6379'") as caught:
        QueryCache(redis_url="http://h:6379")
    assert "\n" not in str(caught.value)
    with pytest.raises(QueryCacheError, match="prefix must not be empty"):
        QueryCache(redis_url=URL, prefix="")

    from service.cli import main

    argv = ["strata", "serve", "--bundles", str(tmp_path), "--redis-url", "nowhere"]
    monkeypatch.setattr(sys, "argv", [*argv, "--port", "0"])  # whatever holds the default port
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("strata: error: bad Redis URL 'nowhere'") and err.count("\n") == 1


def test_has_local_says_whether_a_text_needs_the_encoder_without_counting():
    cache = QueryCache(size=8)
    cache.store("enc", ["A  Red Dog"], np.ones((1, 4), dtype=np.float32))
    assert cache.has_local("enc", "a red dog")  # the same normalised text
    assert not cache.has_local("enc", "a blue dog")
    assert not cache.has_local("other-encoder", "a red dog")
    assert cache.local_counts.hits == 0 and cache.local_counts.misses == 0  # a peek, not a look-up
