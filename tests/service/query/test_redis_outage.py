"""A Redis outage under load: a redis-server of the test's own (a free port, no persistence) is
killed while client threads search without pause, then restarted. No request may fail; the
query cache goes disconnected → connected and its Redis hits resume; the hot swapper
resubscribes and still follows new versions."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from serving_helpers import CountingEncoder, Searching
from waiting import wait_for

from indexer.format.bundle import Bundle
from indexer.update.rows import DeleteConfig, delete_rows
from indexer.versions.publish import RedisPublisher
from service.api.background import BackgroundServer
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.query.cache import CONNECTED, DISCONNECTED, QueryCache
from service.serving.batching import BatchingConfig
from service.serving.hot_swap import HotSwapper
from tests.servers import RedisServer

PREFIX = "strata-outage"


@pytest.fixture
def redis_server():
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not on PATH: install Debian's redis-server package")
    with RedisServer() as server:
        yield server


def test_redis_killed_mid_load_then_restarted(
    text_bundle: Path, tmp_path: Path, minilm, redis_server: RedisServer
):
    bundles = Path(shutil.copytree(text_bundle, tmp_path / "bundles"))
    cache = QueryCache(  # 2 local entries: the repeated queries come from Redis
        size=2, redis_url=redis_server.url, prefix=PREFIX, backoff_s=0.1, max_backoff_s=0.5
    )
    engine = SearchEngine(Bundle.open(bundles), CountingEncoder(minilm), cache=cache)
    config = ServerConfig(port=0, batching=BatchingConfig(max_batch=16, max_wait_ms=2))
    states = [cache.redis_state]
    try:
        with BackgroundServer(engine, config) as server:
            swapper = HotSwapper(
                server.server,
                redis_server.url,
                PREFIX,
                backoff_s=0.1,
                max_backoff_s=0.5,
                poll_s=0.5,
            )
            swapper.start(server.loop)
            try:
                with Searching(server.target) as load:
                    wait_for(lambda: cache.stats()["redis"]["hits"] >= 3, 30, "Redis hits")
                    wait_for(lambda: swapper.connected, 30, "the subscription")

                    redis_server.kill()
                    wait_for(lambda: cache.redis_state == DISCONNECTED, 30, "the cache's outage")
                    states.append(cache.redis_state)
                    wait_for(lambda: not swapper.connected, 30, "the swapper's outage")
                    down = cache.stats()["redis"]
                    served, encoded = load.requests, engine.encoder.calls
                    wait_for(lambda: load.requests >= served + 15, 30, "searches without Redis")
                    assert engine.encoder.calls > encoded  # the encoder stood in for Redis
                    during = cache.stats()["redis"]
                    assert during["skipped"] > down["skipped"]  # Redis not even tried
                    assert during["errors"] == down["errors"]  # no request waited on Redis
                    assert during["hits"] == down["hits"]

                    redis_server.start()  # same port, empty
                    wait_for(lambda: cache.redis_state == CONNECTED, 30, "the cache's reconnect")
                    states.append(cache.redis_state)
                    wait_for(lambda: swapper.connected, 30, "the swapper's reconnect")
                    hits = cache.stats()["redis"]["hits"]
                    wait_for(lambda: cache.stats()["redis"]["hits"] > hits, 30, "Redis hits again")

                    row_id = Bundle.open(bundles).ids([0])[0]
                    name = delete_rows(
                        DeleteConfig(bundles=bundles, ids=(row_id,), verify_sample=4),
                        publisher=RedisPublisher(redis_server.url, PREFIX),
                    ).name
                    wait_for(lambda: server.server.served.engine.bundle.name == name, 30, name)
                    wait_for(
                        lambda: all(seen and seen[-1] == 2 for seen in load.versions),
                        30,
                        "searches on it",
                    )
            finally:
                swapper.close()
    finally:
        cache.close()

    assert load.failures == []
    assert states == [CONNECTED, DISCONNECTED, CONNECTED]
    stats = cache.stats()["redis"]
    assert stats["reconnects"] == 1 and stats["stored"] > 0
    assert swapper.state()["reconnects"] >= 1 and swapper.state()["swaps"] == 1
    assert all(v[-1] == 2 for v in load.versions)
