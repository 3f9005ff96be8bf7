"""`strata serve --workers 2` as a user runs it: one port, every worker answering, one summed
/metrics; the black box over the pool — the fuzz, versions published under load (five hot
swaps), a Reload, a Redis outage, a worker killed, and the stop — each on the same real
processes, a real Redis of the test's own and real gRPC.

The premise of each test is built into it: versions are made by the indexer, the Redis is
killed by the test, the worker is killed by its pid. Waits are bounded waits for events."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from serving_helpers import Searching
from waiting import WAIT_S, wait_for

from indexer.format.bundle import Bundle
from indexer.update.rows import DeleteConfig, delete_rows
from indexer.versions.publish import RedisPublisher
from service._generated.strata.v1 import admin_pb2 as apb
from service._generated.strata.v1 import admin_pb2_grpc
from service.api.grpc.client import StrataClient
from service.cli.serve_setup import (
    WORKER_LIMIT,
    Backend,
    cores_of_their_own,
    usable_cores,
    worker_count,
)
from service.serving.metrics_sum import summed_exposition
from tests.robustness.fuzz import run_fuzz
from tests.servers import RedisServer
from training.core.errors import InputError

TOKEN = "pool-admin-token"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
START_S = 120.0  # two workers importing and loading their encoders on a busy 2-core machine


@dataclass
class Pool:
    process: subprocess.Popen[str]
    target: str
    metrics_url: str
    bundles: Path
    redis: RedisServer
    prefix: str
    log: list[str] = field(default_factory=list)

    def series(self, name: str, **labels: str) -> float:
        """One sample of the pool's summed /metrics (the sum over matching label sets)."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as answer:
            text = answer.read().decode()
        total, found = 0.0, False
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and labels.items() <= sample.labels.items():
                    total, found = total + sample.value, True
        assert found, f"no series {name} {labels} in the pool's /metrics"
        return total

    def said(self, text: str) -> bool:
        return any(text in line for line in list(self.log))

    def workers(self) -> list[int]:
        """The pids of the worker processes: the pool's grandchildren (forkserver's children)."""
        children = _children()
        return [w for child in children.get(self.process.pid, []) for w in children.get(child, [])]


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(parent, []).append(int(entry.name))
    return tree


def new_version(pool: Pool, row: int) -> int:
    """A version without one more row, made and announced on the pool's Redis by the indexer."""
    row_id = Bundle.open(pool.bundles).ids([row])[0]
    config = DeleteConfig(bundles=pool.bundles, ids=(row_id,), verify_sample=4)
    summary = delete_rows(config, publisher=RedisPublisher(pool.redis.url, pool.prefix))
    return int(summary.name[1:])


def start_pool(folder: Path, bundles: Path, redis: RedisServer, *extra: str) -> Pool:
    token = folder / "token"
    token.write_text(TOKEN)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "STRATA_LOG_LEVEL": "INFO"}
    prefix = "strata-pool-test"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service",
            "serve",
            "--bundles",
            str(bundles),
            "--port",
            "0",
            "--device",
            "cpu",
            "--workers",
            "2",
            "--metrics-port",
            "0",
            "--grace",
            "3",
            "--redis-url",
            redis.url,
            "--redis-prefix",
            prefix,
            "--max-wait-ms",
            "1",
            "--admin-token-file",
            str(token),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    log: list[str] = []
    assert process.stderr is not None and process.stdout is not None
    threading.Thread(target=lambda: log.extend(process.stderr), daemon=True).start()
    lines = [process.stdout.readline() for _ in range(2)]
    assert lines[0].startswith("serving") and "2 workers" in lines[0], (lines, log)
    target = lines[0].split(" on ")[-1].split(";")[0]
    running = Pool(process, target, lines[1].split()[1], bundles, redis, prefix, log)
    wait_for(lambda: running.series("strata_redis_up") == 1, WAIT_S, "Redis seen")
    return running


@contextmanager
def running_pool(folder: Path, text_bundle: Path) -> Iterator[Pool]:
    """A pool of two workers over a copy of the text bundle, following a Redis of its own."""
    bundles = Path(shutil.copytree(text_bundle, folder / "bundles"))
    with RedisServer() as redis:
        pool = None
        try:
            pool = start_pool(folder, bundles, redis)
            yield pool
        finally:
            if pool is not None and pool.process.poll() is None:
                pool.process.kill()
                pool.process.wait()


@pytest.fixture(scope="module")
def pool(text_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """One pool for the tests that leave it serving (in any order)."""
    with running_pool(tmp_path_factory.mktemp("pool"), text_bundle) as running:
        yield running


@pytest.mark.slow
def test_two_workers_answer_on_one_port_and_their_metrics_add_up(pool: Pool):
    assert len(pool.workers()) == 2
    before = pool.series("grpc_server_handled_total", grpc_method="Search", grpc_code="OK")
    for _ in range(6):  # each client a connection of its own: the kernel spreads them
        with StrataClient(pool.target) as client:
            for text in ("a dog", "a red car", "a cat"):
                assert len(client.search(text, k=3).hits) == 3
    after = pool.series("grpc_server_handled_total", grpc_method="Search", grpc_code="OK")
    assert after - before == 18  # every call counted once, whichever worker answered it
    assert pool.series("strata_workers") == 2
    assert pool.series("strata_serving") == 1


@pytest.mark.skipif(not cores_of_their_own(2, 1), reason="needs two cores of the pool's own")
def test_idle_workers_hold_their_threads_to_cores_of_their_own(pool: Pool):
    """Idle, each worker's threads gather on its own core (service/serving/thread_placement.py);
    a worker's main thread is its event loop's."""

    def gathered() -> list[set[int]]:
        return [os.sched_getaffinity(worker) for worker in pool.workers()]

    wait_for(lambda: all(len(cores) == 1 for cores in gathered()), WAIT_S, "workers gathered")
    assert len(set.union(*gathered())) == 2  # a core each
    assert pool.series("strata_threads_gathered") == 2  # the workers' gauges summed


@pytest.mark.slow
def test_a_small_fuzz_finds_the_pool_sound(pool: Pool):
    report = run_fuzz(pool.target, requests=200, seed=3, max_seconds=90, concurrency=4)
    assert report["sent"] == 200 and report["unexpected"] == {}, report["unexpected"]
    assert report["ok"] and report["after"]["health"] == "SERVING"


@pytest.mark.slow
def test_five_published_versions_reach_every_worker_under_load_with_no_failed_call(pool: Pool):
    swaps = pool.series("strata_hot_swaps_total", result="ok")
    with Searching(pool.target, threads=4) as load:
        wait_for(lambda: all(len(v) >= 2 for v in load.versions), WAIT_S, "first searches")
        for row in range(5):
            version = new_version(pool, row)
            done = f"all 2 workers serve version {version}"
            wait_for(lambda d=done: pool.said(d), WAIT_S, done)
            for _ in range(4):  # once said, a call on any connection, any worker: the new one
                with StrataClient(pool.target) as client:
                    assert client.search("a dog", k=1).bundle_version == version
    assert load.failures == []
    for versions in load.versions:
        assert versions == sorted(versions)  # each client's answers moved forward only
    assert pool.series("strata_bundle_version") == version
    assert pool.series("strata_hot_swaps_total", result="ok") - swaps == 10  # 5 × 2 workers


@pytest.mark.slow
def test_a_reload_reaching_one_worker_is_done_by_every_worker(pool: Pool):
    served = int(pool.series("strata_bundle_version"))
    row_id = Bundle.open(pool.bundles).ids([10])[0]
    delete_rows(DeleteConfig(bundles=pool.bundles, ids=(row_id,), verify_sample=4))  # unannounced
    with grpc.insecure_channel(pool.target) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        outcome = admin.Reload(apb.ReloadRequest(), metadata=AUTH, timeout=60)
    assert (outcome.previous_version, outcome.bundle_version) == (served, served + 1)
    for _ in range(8):  # any connection, so any worker, answers from the new version at once
        with StrataClient(pool.target) as client:
            assert client.search("a dog", k=1).bundle_version == served + 1
    assert pool.series("strata_bundle_version") == served + 1


@pytest.mark.slow
def test_searches_go_on_while_the_pools_redis_is_down(pool: Pool):
    pool.redis.kill()
    try:
        with StrataClient(pool.target) as client:
            for i in range(6):  # new texts: each embedded, its cache look-up failing fast
                assert len(client.search(f"a dog number {i} in the outage", k=2).hits) == 2
        wait_for(lambda: pool.series("strata_redis_up") == 0, WAIT_S, "Redis seen down")
    finally:
        pool.redis.start()
    wait_for(lambda: pool.series("strata_redis_up") == 1, WAIT_S, "Redis seen back")


@pytest.mark.slow
def test_a_killed_worker_is_started_again(pool: Pool):
    first, second = pool.workers()
    restarts = pool.series("strata_worker_restarts_total")
    os.kill(first, signal.SIGKILL)
    wait_for(
        lambda: pool.series("strata_worker_restarts_total") == restarts + 1, WAIT_S, "a restart"
    )
    wait_for(lambda: pool.series("strata_workers") == 2, START_S, "the new worker serving")
    assert second in pool.workers() and first not in pool.workers()
    for _ in range(6):
        with StrataClient(pool.target) as client:
            assert len(client.search("a red car", k=2).hits) == 2


@pytest.mark.slow
def test_sigterm_stops_every_worker_and_the_pool_exits(text_bundle: Path, tmp_path: Path):
    with running_pool(tmp_path, text_bundle) as pool:
        workers = pool.workers()
        assert len(workers) == 2
        with Searching(pool.target, threads=2) as load:
            wait_for(lambda: all(len(v) >= 1 for v in load.versions), WAIT_S, "searches")
            pool.process.send_signal(signal.SIGTERM)
            out, _ = pool.process.communicate(timeout=WAIT_S)
        assert pool.process.returncode == 0 and out.strip().endswith("stopped")
        assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
        assert not any("Traceback" in line for line in pool.log)


def test_the_summed_exposition_adds_counters_and_keeps_gauges_by_meaning():
    worker = (
        "# TYPE strata_hot_swaps_total counter\n"
        'strata_hot_swaps_total{{result="ok"}} {swaps}\n'
        "# TYPE strata_bundle_version gauge\nstrata_bundle_version {version}\n"
        "# TYPE strata_serving gauge\nstrata_serving {serving}\n"
        "# TYPE strata_queue_depth gauge\nstrata_queue_depth {queue}\n"
        "# TYPE strata_redis_up gauge\nstrata_redis_up NaN\n"
    )
    texts = [
        worker.format(swaps=2, version=4, serving=1, queue=3),
        worker.format(swaps=1, version=3, serving=0, queue=2),
    ]
    summed = {
        sample.name: sample.value
        for family in text_string_to_metric_families(summed_exposition(texts).decode())
        for sample in family.samples
    }
    assert summed["strata_hot_swaps_total"] == 3  # counted in either worker
    assert summed["strata_bundle_version"] == 3  # the oldest still served
    assert summed["strata_serving"] == 0  # not every worker serves
    assert summed["strata_queue_depth"] == 5
    assert summed["strata_redis_up"] != summed["strata_redis_up"]  # NaN: no Redis anywhere


def test_the_default_is_one_worker_per_usable_core_up_to_the_limit(tmp_path: Path):
    faiss, lite = Backend.parse("faiss"), Backend.parse("./rows.db")
    assert worker_count(None, faiss, cores=3) == 3
    assert worker_count(None, faiss, cores=64) == WORKER_LIMIT
    assert worker_count(None, lite, cores=4) == 1  # Milvus Lite: one process
    assert worker_count(5, faiss, cores=2) == 5  # asked for: as asked
    with pytest.raises(InputError, match="Milvus Lite"):
        worker_count(2, lite)
    quota = tmp_path / "cpu.max"
    affinity = len(os.sched_getaffinity(0))
    quota.write_text("100000 100000\n")  # a container limited to one core
    assert usable_cores(quota) == 1
    quota.write_text("max 100000\n")
    assert usable_cores(quota) == affinity
    assert usable_cores(tmp_path / "absent") == affinity


def test_workers_hold_threads_to_cores_of_their_own_only_where_they_have_them(tmp_path: Path):
    affinity = len(os.sched_getaffinity(0))
    quota = tmp_path / "cpu.max"
    quota.write_text("max 100000\n")
    assert cores_of_their_own(affinity, 1, quota) == (affinity >= 2)
    assert not cores_of_their_own(affinity, 2, quota)  # computing on two threads each
    assert not cores_of_their_own(affinity + 1, 1, quota)  # more workers than cores
    quota.write_text(f"{100000 * affinity} 100000\n")  # a limit of every core: its own
    assert cores_of_their_own(affinity, 1, quota) == (affinity >= 2)
    quota.write_text("50000 100000\n")  # half a core, on cores others use too
    assert not cores_of_their_own(1, 1, quota)
