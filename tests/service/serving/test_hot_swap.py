"""Hot swap: which announced versions are loaded, and a live server following the real Redis
(127.0.0.1:6379, or STRATA_TEST_REDIS_URL) while client threads search without pause — new
versions made by the indexer and published with `indexer.versions.publish`, zero failed requests;
and a SIGTERM while a version is being verified exits without waiting for the verification."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import threading
from pathlib import Path

import pytest
import redis
from serving_helpers import REDIS_URL as URL
from serving_helpers import Searching
from waiting import WAIT_S, wait_for

from indexer.format.bundle import Bundle
from indexer.update.rows import DeleteConfig, delete_rows
from indexer.versions.bundle_store import BundleStore
from indexer.versions.publish import ChannelKeys, RedisPublisher, announcement, publish_version
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient, StrataClientError
from service.api.server import ServerConfig, StrataServer, serve
from service.engine.search import SearchEngine
from service.query.cache import QueryCache
from service.serving.batching import BatchingConfig
from service.serving.hot_swap import HotSwapper, VersionTracker, load_engine


@pytest.fixture
def bundles(text_bundle: Path, tmp_path: Path) -> Path:
    """A copy of the session's text bundle (v000001), free to publish new versions into."""
    return Path(shutil.copytree(text_bundle, tmp_path / "bundles"))


def delete_and_publish(bundles: Path, row: int, prefix: str) -> str:
    """A new version (the current one without one row), made and announced by the indexer."""
    row_id = Bundle.open(bundles).ids([row])[0]
    config = DeleteConfig(bundles=bundles, ids=(row_id,), verify_sample=4)
    return delete_rows(config, publisher=RedisPublisher(URL, prefix)).name


# --- pure ----------------------------------------------------------------------------------------


def record(name: str, version: int | None = None) -> dict:
    return {"name": name, "version": version or int(name[1:]), "path": f"/b/{name}"}


def test_the_tracker_loads_each_newer_version_once_and_the_newest_of_several():
    tracker = VersionTracker("v000003", 3)
    assert tracker.skip_reason(record("v000003")) == "duplicate"  # the served one
    assert tracker.skip_reason(record("v000002")) == "older"
    assert tracker.skip_reason({"name": "v000009"}) == "malformed"  # no path
    assert tracker.skip_reason({"path": "/x"}) == "malformed"
    assert tracker.skip_reason(record("v000004")) is None
    chosen = tracker.choose([record("v000005"), record("v000002"), record("v000004")])
    assert chosen is not None and chosen["name"] == "v000005"
    assert tracker.skip_reason(record("v000005")) == "duplicate"  # considered once, even if
    assert tracker.skip_reason(record("v000004")) == "duplicate"  # it fails to load
    tracker.served(chosen)
    assert (tracker.served_name, tracker.served_version) == ("v000005", 5)
    assert tracker.choose([record("v000001")]) is None
    assert tracker.skip_reason({"name": "v000007", "path": "/b/v000007"}) is None  # from name


# --- a live server -------------------------------------------------------------------------------


def test_published_versions_swap_in_under_load_with_no_failed_request(
    bundles: Path, minilm, prefix: str
):
    publish_version(BundleStore(bundles), "v000001", RedisPublisher(URL, prefix))
    engine = SearchEngine(Bundle.open(bundles), minilm, cache=QueryCache(size=64))
    config = ServerConfig(port=0, batching=BatchingConfig(max_batch=16, max_wait_ms=2))
    with BackgroundServer(engine, config) as server:
        swapper = HotSwapper(server.server, URL, prefix, backoff_s=0.1, poll_s=1.0)
        swapper.start(server.loop)
        try:
            wait_for(lambda: swapper.connected, WAIT_S, "the subscription")
            with Searching(server.target) as load:
                wait_for(lambda: all(len(v) >= 2 for v in load.versions), 30, "first searches")
                for row, name in ((0, "v000002"), (1, "v000003")):
                    assert delete_and_publish(bundles, row, prefix) == name
                    wait_for(lambda n=name: server.server.served.engine.bundle.name == n, 30, name)
                    version = int(name[1:])
                    wait_for(  # every client's latest answer comes from the new version
                        lambda v=version: all(seen and seen[-1] == v for seen in load.versions),
                        30,
                        f"searches on {name}",
                    )
            state = swapper.state()
        finally:
            swapper.close()
        with StrataClient(server.target) as client:
            assert client.index_info().rows == 298
            deleted = Bundle.open(bundles / "v000001").ids([0])[0]
            with pytest.raises(StrataClientError, match="NOT_FOUND"):
                client.explain("a dog", item_id=deleted)

    assert load.failures == []
    for versions in load.versions:
        assert versions == sorted(versions)  # each client moved forward only
        assert versions[0] == 1 and versions[-1] == 3
    assert {v for versions in load.versions for v in versions} == {1, 2, 3}
    assert state["swaps"] == 2 and state["failures"] == 0 and state["served"] == "v000003"
    assert server.server.served.swaps == 2
    assert engine.cache is server.server.served.engine.cache  # the new engines share the cache


def test_a_version_that_cannot_load_is_skipped_and_an_older_one_ignored(
    bundles: Path, minilm, prefix: str
):
    engine = SearchEngine(Bundle.open(bundles), minilm)
    store, publisher = BundleStore(bundles), RedisPublisher(URL, prefix)
    with BackgroundServer(engine, ServerConfig(port=0)) as server:
        swapper = HotSwapper(server.server, URL, prefix, backoff_s=0.1, poll_s=60)
        swapper.start(server.loop)
        try:
            wait_for(lambda: swapper.connected, WAIT_S, "the subscription")
            client = redis.Redis.from_url(URL)
            broken = {**announcement(bundles / "v000001"), "name": "v000009", "version": 9}
            broken["path"] = str(bundles / "v000009")  # announced, but no such folder
            client.publish(ChannelKeys(prefix).channel, json.dumps(broken))
            wait_for(lambda: swapper.counts.failures == 1, WAIT_S, "the failed load")
            assert server.server.served.engine.bundle.name == "v000001"
            assert "v000009" in swapper.counts.events[-1].name
            assert swapper.counts.events[-1].result == "failed"

            name = delete_and_publish(bundles, 5, prefix)  # v000002: newer than served
            wait_for(lambda: server.server.served.engine.bundle.name == name, WAIT_S, name)
            publish_version(store, "v000001", publisher)  # a rollback: older, not followed
            wait_for(lambda: swapper.counts.announcements >= 3, WAIT_S, "the third announcement")
            counts = swapper.counts  # every announcement decided: the rollback too
            wait_for(lambda: counts.decided == counts.announcements, WAIT_S, "the decisions")
            assert server.server.served.engine.bundle.name == "v000002"
            client.close()
            with StrataClient(server.target) as grpc_client:
                assert grpc_client.search("a dog", k=3).bundle_version == 2
            registry = server.server.metrics.registry
            for result, count in (("ok", 1), ("failed", 1)):
                labels = {"result": result}
                assert registry.get_sample_value("strata_hot_swaps_total", labels) == count
        finally:
            swapper.close()
    assert swapper.state()["swaps"] == 1 and swapper.state()["failures"] == 1


class HeldLoader:
    """The real load (`load_engine`: open, verify, load), held at its start until released;
    `finished` once it has returned."""

    def __init__(self) -> None:
        self.arrived, self.released, self.finished = (threading.Event() for _ in range(3))

    def __call__(self, record: dict, current: SearchEngine) -> SearchEngine:
        self.arrived.set()
        self.released.wait(WAIT_S)  # never released (a failing test): goes on after WAIT_S
        try:
            return load_engine(record, current)
        finally:
            self.finished.set()


def test_sigterm_during_a_verification_exits_without_waiting_for_it(
    bundles: Path, minilm, prefix: str
):
    """`serve` (what `strata serve` runs) gets SIGTERM while the hot swap is verifying a new
    version: it returns at the grace while the verification is still held. Before, the load ran
    on the loop's default executor, which `asyncio.run` joins at its end: the exit waited for
    the verification to finish."""
    engine = SearchEngine(Bundle.open(bundles), minilm)
    delete_and_publish(bundles, 0, prefix)  # v000002, announced: the swapper loads it at once
    loader = HeldLoader()
    swappers: list[HotSwapper] = []

    def ready(server: StrataServer) -> None:
        swappers.append(HotSwapper(server, URL, prefix, loader=loader))
        swappers[0].start()

    def terminate_once_held() -> None:
        if loader.arrived.wait(WAIT_S):
            os.kill(os.getpid(), signal.SIGTERM)  # serve's handler takes it (main thread)

    signaller = threading.Thread(target=terminate_once_held, daemon=True)
    signaller.start()
    try:
        asyncio.run(serve(engine, ServerConfig(port=0, grace_s=0.5), on_ready=ready))
        held_at_exit = not loader.finished.is_set()
    finally:
        loader.released.set()
        signaller.join(WAIT_S)
    assert loader.arrived.is_set()
    assert held_at_exit  # serve returned while the verification was still held
    assert loader.finished.wait(WAIT_S)  # (the abandoned daemon thread ends on its own)
