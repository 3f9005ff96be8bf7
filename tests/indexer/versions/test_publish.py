"""Publishing to the real Redis (127.0.0.1:6379, or STRATA_TEST_REDIS_URL): the key, the
history and the channel; the lock two publishers serialise on; an unreachable Redis and a failed
announcement that leave CURRENT where it was. Each test has its own key prefix, removed after."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid
from pathlib import Path

import pytest
import redis
from bundle_inputs import Inputs, assert_one_line_error
from waiting import WAIT_S, wait_for

from indexer.build.full import build_bundle
from indexer.format.manifest import read_current
from indexer.versions.bundle_store import BundleStore
from indexer.versions.channel import VersionChannel
from indexer.versions.publish import (
    ChannelKeys,
    PublishError,
    RedisPublisher,
    publish_version,
)
from training.core.files import sha256_file

URL = os.environ.get("STRATA_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
UNREACHABLE = "redis://127.0.0.1:1/0"


@pytest.fixture
def prefix():
    """A key prefix of this test's own; every key under it is deleted afterwards."""
    client = redis.Redis.from_url(URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.exceptions.ConnectionError as exc:
        pytest.fail(f"no Redis at {URL}: {exc}; run one at 127.0.0.1:6379 (.ci/run starts one)")
    name = f"strata-test-{uuid.uuid4().hex[:12]}"
    yield name
    keys = list(client.scan_iter(f"{name}:*"))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def two_versions(inputs: Inputs, tmp_path: Path) -> BundleStore:
    """A bundle directory holding v000001 and v000002 (current), published without Redis."""
    out = tmp_path / "bundles"
    inputs.build(out, verify_sample=0)
    inputs.build(out, verify_sample=0)
    return BundleStore(out)


def test_build_and_delete_record_and_announce_their_versions(
    strata_main, inputs: Inputs, tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch
):
    out = tmp_path / "bundles"
    channel = VersionChannel(URL, prefix)
    assert channel.current() is None
    with channel.subscribe() as subscription:
        built = strata_main(*inputs.args(out, "--redis-url", URL, "--redis-prefix", prefix))
        assert built.returncode == 0, built.stderr
        announced = subscription.get(timeout=WAIT_S)
        assert f"announced    {URL} key {prefix}:bundle:current" in built.stdout
        monkeypatch.setenv("STRATA_REDIS_URL", URL)  # the environment's URL, the CLI's prefix
        deleted = strata_main(
            "index", "delete", "--bundles", str(out), "--id", "row-7", "--redis-prefix", prefix
        )
        assert deleted.returncode == 0, deleted.stderr
        second = subscription.get(timeout=WAIT_S)
    assert announced is not None and second is not None
    assert announced["name"] == "v000001" and announced["rows"] == 600
    assert announced["path"] == str((out / "v000001").resolve())
    assert announced["manifest_sha256"] == sha256_file(out / "v000001" / "manifest.json")
    assert second["name"] == "v000002" and second["rows"] == 599
    assert channel.current() == second
    assert channel.history() == {"v000001": announced, "v000002": second}
    assert read_current(out) == "v000002"
    client = redis.Redis.from_url(URL)
    assert client.exists(ChannelKeys(prefix).lock) == 0  # released
    client.close()


def test_listeners_get_the_current_version_then_each_new_one(
    two_versions: BundleStore, prefix: str
):
    store, publisher = two_versions, RedisPublisher(URL, prefix)
    publish_version(store, "v000001", publisher)
    channel = VersionChannel(URL, prefix)
    listener = channel.listen(idle_timeout=WAIT_S, include_current=True)
    assert next(listener)["name"] == "v000001"  # subscribed before the current key was read
    publish_version(store, "v000002", publisher)
    assert next(listener)["name"] == "v000002"
    listener.close()

    async def follow() -> list[str]:
        names = []
        async for record in channel.alisten(idle_timeout=1, include_current=True):
            names.append(record["name"])
            if len(names) == 1:
                await asyncio.to_thread(publish_version, store, "v000001", publisher)
        return names

    assert asyncio.run(follow()) == ["v000002", "v000001"]  # then 1 s idle: the iterator ends
    assert read_current(store.root) == "v000001"


def test_two_publishers_serialise_on_the_lock(
    two_versions: BundleStore, prefix: str, caplog: pytest.LogCaptureFixture
):
    store = two_versions
    holder = RedisPublisher(URL, prefix)
    impatient = RedisPublisher(URL, prefix, wait=0.3)
    patient = RedisPublisher(URL, prefix, wait=WAIT_S)
    outcome: dict[str, object] = {}
    caplog.set_level(logging.INFO, logger="indexer.versions.publish")

    def patient_waits() -> bool:
        return any(
            r.threadName == "patient" and "is held by another job" in r.getMessage()
            for r in caplog.records
        )

    def publish_patiently() -> None:
        outcome["announced"] = publish_version(store, "v000001", patient)
        outcome["at"] = time.monotonic()

    with holder.locked():  # another job is between its switch and its announcement
        with pytest.raises(PublishError, match="another job is publishing") as refused:
            publish_version(store, "v000001", impatient)
        assert "v000001 was not published (CURRENT still names v000002)" in str(refused.value)
        waiter = threading.Thread(target=publish_patiently, name="patient")
        waiter.start()
        wait_for(patient_waits, WAIT_S, "the patient publisher to find the lock held")
        assert waiter.is_alive() and read_current(store.root) == "v000002"
        released = time.monotonic()
    waiter.join(timeout=WAIT_S)
    assert outcome["at"] >= released and outcome["announced"]
    assert read_current(store.root) == "v000001"
    assert VersionChannel(URL, prefix).current()["name"] == "v000001"


def test_an_unreachable_redis_fails_before_current_moves(
    strata_main, inputs: Inputs, two_versions: BundleStore, prefix: str
):
    store = two_versions
    # a build checks Redis before any work: nothing is written
    run = strata_main(*inputs.args(store.root, "--redis-url", UNREACHABLE))
    line = assert_one_line_error(run, f"cannot reach Redis at {UNREACHABLE}: ")
    assert "Connection refused" in line or "connecting" in line
    assert read_current(store.root) == "v000002"
    assert sorted(v.name for v in store.versions()) == ["v000001", "v000002"]
    # Redis gone between the check and the switch: the version stays unpublished
    with pytest.raises(PublishError, match=r"v000001 was not published .CURRENT still names v0+2"):
        publish_version(store, "v000001", RedisPublisher(UNREACHABLE, prefix))
    assert read_current(store.root) == "v000002"
    # ... and `strata index publish` publishes it once Redis is back
    run = strata_main(
        "index",
        "publish",
        str(store.root),
        "--version",
        "1",
        "--redis-url",
        URL,
        "--redis-prefix",
        prefix,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"published    {store.root / 'v000001'} (now CURRENT)")
    assert read_current(store.root) == "v000001"
    assert VersionChannel(URL, prefix).current()["name"] == "v000001"


def test_a_failed_announcement_switches_current_back(two_versions: BundleStore, prefix: str):
    store, publisher = two_versions, RedisPublisher(URL, prefix)
    publish_version(store, "v000002", publisher)
    client = redis.Redis.from_url(URL, decode_responses=True)
    client.delete(ChannelKeys(prefix).history)
    client.set(ChannelKeys(prefix).history, "not a hash")  # the announcement script refuses
    with pytest.raises(PublishError, match=r"WRONGTYPE .* not a hash; v000001 was not published"):
        publish_version(store, "v000001", publisher)
    assert read_current(store.root) == "v000002"
    assert VersionChannel(URL, prefix).current()["name"] == "v000002"
    assert client.exists(ChannelKeys(prefix).lock) == 0
    client.close()


def test_an_on_published_hook_and_redis_see_the_same_version(
    inputs: Inputs, tmp_path: Path, prefix: str
):
    seen = []
    channel = VersionChannel(URL, prefix)
    summary = build_bundle(
        inputs.config(tmp_path / "bundles", verify_sample=0),
        on_published=lambda path: seen.append((path.name, channel.current()["name"])),
        publisher=RedisPublisher(URL, prefix),
    )
    assert seen == [("v000001", "v000001")] and summary.announced
