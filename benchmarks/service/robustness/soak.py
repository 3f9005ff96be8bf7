"""Soak: a real server under continuous client load through hot swaps, a Redis outage and fuzzing.

A small real bundle (N synthetic clustered rows, random GraSP-VL and CEDAR artifacts, built by
the indexer), MiniLM embedding the queries on the server, a query cache and a hot swapper on a
redis-server of our own (a free port, no persistence, so it can be killed and restarted). C
client threads search back to back for the whole run (a pool of repeated queries, so the cache
hits, and every fourth query new, so the encoder works too); each phase counts the requests
that completed in it and the ones that failed:

  hot_swaps      `--swaps` new versions published (`strata index delete` of one row, announced
                 in Redis) during load, each waited for until the server serves it;
  redis_outage   redis-server killed, held down `--outage-seconds`, restarted; the query cache
                 must go disconnected → connected and its Redis hits resume, and a version
                 published after the restart must still be swapped in;
  fuzz           tests/robustness/fuzz.py's
                 `run_fuzz(target, requests, seed, max_seconds)` against the same server

then the server must still answer correctly: a vector query's hits equal a fresh in-process
search of the served version, and GetIndexInfo names that version.

    python -m benchmarks.service.robustness.soak  # 5,000 rows, 4 clients, 10,000 fuzzed
    python -m benchmarks.service.robustness.soak --swaps 20 --threads 8 --json runs/bench/soak.json

Exits 1 when any request failed or a check did not hold.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import publish
from benchmarks.service.load import QUERIES as LOAD_QUERIES
from tests.robustness.fuzz import run_fuzz
from tests.servers import RedisServer
from training.core.errors import InputError

log = logging.getLogger("strata.soak")

QUERIES = (*LOAD_QUERIES, "a cat on a sofa", "an old man reading a newspaper")
PREFIX = "strata-soak"


def wait_for(condition: Callable[[], bool], timeout: float, what: str, step: float = 0.05) -> float:
    """Seconds until `condition()` held; InputError naming `what` after `timeout`."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise InputError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(step)
    return time.monotonic() - started


# --- load ----------------------------------------------------------------------------------------


@dataclass
class Tally:
    requests: int = 0
    failures: int = 0
    versions: set[int] = field(default_factory=set)
    samples: list[str] = field(default_factory=list)  # the first failures' messages

    def minus(self, before: Tally) -> dict[str, Any]:
        return {
            "requests": self.requests - before.requests,
            "failures": self.failures - before.failures,
            "failure_samples": self.samples[len(before.samples) :][:5],
        }


class Load:
    """`threads` clients searching back to back until `stop()`; counts shared under a lock."""

    def __init__(self, target: str, threads: int, timeout: float = 15.0) -> None:
        self.target, self.timeout = target, timeout
        self.tally = Tally()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._client, args=(i,), name=f"soak-client-{i}", daemon=True)
            for i in range(threads)
        ]

    def _client(self, index: int) -> None:
        from service.api.grpc.client import StrataClient

        with StrataClient(self.target, timeout=self.timeout) as client:
            i = 0
            while not self._stop.is_set():
                text = QUERIES[(index + i) % len(QUERIES)]
                if i % 4 == 3:
                    text = f"{text} number {index}-{i}"  # new: the encoder's work
                try:
                    result = client.search(text, k=10)
                    ok, message = len(result.hits) == 10, f"{len(result.hits)} hits for {text!r}"
                except Exception as exc:
                    ok, message, result = False, f"{type(exc).__name__}: {exc}", None
                with self._lock:
                    self.tally.requests += 1
                    if result is not None:
                        self.tally.versions.add(result.bundle_version)
                    if not ok:
                        self.tally.failures += 1
                        if len(self.tally.samples) < 50:
                            self.tally.samples.append(message)
                i += 1

    def snapshot(self) -> Tally:
        with self._lock:
            return Tally(
                self.tally.requests,
                self.tally.failures,
                set(self.tally.versions),
                list(self.tally.samples),
            )

    @contextlib.contextmanager
    def phase(self, into: dict[str, Any]) -> Iterator[None]:
        """Counts the requests completed while the block runs into `into`."""
        before, started = self.snapshot(), time.monotonic()
        try:
            yield
        finally:
            seconds = time.monotonic() - started
            delta = self.snapshot().minus(before)
            into.update(delta, seconds=round(seconds, 2), qps=round(delta["requests"] / seconds, 1))

    def start(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout + 5)


# --- the run -------------------------------------------------------------------------------------


def publish_delete(bundles: Path, row_id: str, redis_url: str) -> str:
    """A new version without `row_id`, published and announced in Redis: its name."""
    from indexer.update.rows import DeleteConfig, delete_rows
    from indexer.versions.publish import RedisPublisher

    config = DeleteConfig(bundles=bundles, ids=(row_id,), verify_sample=8)
    return delete_rows(config, publisher=RedisPublisher(redis_url, PREFIX)).name


def fuzz_phase(target: str, requests: int, seconds: float) -> dict[str, Any]:
    try:
        result = run_fuzz(target, requests=requests, seed=0, max_seconds=seconds)
    except Exception as exc:  # the fuzzer's own fault: reported, the soak goes on
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"result": result}


def final_check(target: str, bundles: Path, served: str) -> dict[str, Any]:
    """The server, idle now, against a fresh in-process search of the version it should serve."""
    from indexer.format.bundle import Bundle
    from service.api.grpc.client import StrataClient

    bundle = Bundle.open(bundles / served)
    vector = np.random.default_rng(7).normal(size=bundle.dim).astype(np.float32)
    vector /= np.linalg.norm(vector)
    _, rows = bundle.search(vector[None, :], "full", 10)
    expected = bundle.ids(rows[0])
    with StrataClient(target, timeout=30) as client:
        info = client.index_info()
        got = client.search(vector=vector.tolist(), granularity="full", k=10)
        text = client.search("a dog", k=10)
    checks = {
        "index_info_version": info.bundle_version == bundle.version,
        "vector_hits_match": [h.id for h in got.hits] == expected,
        "text_query_answers": len(text.hits) == 10 and text.bundle_version == bundle.version,
    }
    return {"served": served, "checks": checks, "ok": all(checks.values())}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.service.load import build_gallery
    from indexer.format.bundle import Bundle
    from service.api.background import BackgroundServer
    from service.api.server import ServerConfig
    from service.engine.search import SearchEngine
    from service.query.cache import QueryCache
    from service.serving.batching import BatchingConfig
    from service.serving.hot_swap import HotSwapper
    from training.core.encoders import load_encoder

    phases: dict[str, dict[str, Any]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="strata-soak-") as folder,
        RedisServer() as redis_server,
    ):
        started = time.monotonic()
        bundles = build_gallery(Path(folder), args.rows, 384)
        cache = QueryCache(
            size=args.cache_size,
            redis_url=redis_server.url,
            prefix=PREFIX,
            backoff_s=0.2,
            max_backoff_s=2.0,
        )
        engine = SearchEngine(
            Bundle.open(bundles), load_encoder("minilm", device="cpu"), None, cache
        )
        config = ServerConfig(port=0, batching=BatchingConfig(max_batch=32, max_wait_ms=2))
        setup_s = time.monotonic() - started
        with BackgroundServer(engine, config) as server:
            swapper = HotSwapper(
                server.server, redis_server.url, PREFIX, backoff_s=0.2, max_backoff_s=2.0, poll_s=2
            )
            swapper.start(server.loop)
            load = Load(server.target, args.threads).start()
            try:
                time.sleep(args.warmup_seconds)
                deleted = 0

                def swap_once() -> float:
                    nonlocal deleted
                    began = time.monotonic()
                    name = publish_delete(bundles, f"row-{deleted}", redis_server.url)
                    deleted += 1
                    wait_for(
                        lambda: server.server.served.engine.bundle.name == name,
                        60,
                        f"{name} served",
                    )
                    return time.monotonic() - began

                phases["hot_swaps"] = hot = {"published": args.swaps}
                with load.phase(hot):
                    seconds = []
                    for _ in range(args.swaps):
                        time.sleep(args.swap_gap_seconds)
                        seconds.append(round(swap_once(), 2))
                hot["publish_to_served_s"] = seconds
                hot["served"] = server.server.served.engine.bundle.name

                phases["redis_outage"] = outage = {}
                with load.phase(outage):
                    time.sleep(1.0)
                    redis_before = cache.stats()["redis"]["hits"]
                    redis_server.kill()
                    outage["detected_s"] = round(
                        wait_for(
                            lambda: cache.redis_state == "disconnected", 10, "cache sees outage"
                        ),
                        2,
                    )
                    time.sleep(args.outage_seconds)
                    encoded_during = cache.stats()["local"]["misses"]
                    redis_server.start()
                    outage["reconnected_s"] = round(
                        wait_for(lambda: cache.redis_state == "connected", 30, "cache reconnect"), 2
                    )
                    wait_for(lambda: swapper.connected, 30, "hot swapper reconnect")
                    hits_after = cache.stats()["redis"]["hits"]
                    outage["redis_hits_resume_s"] = round(
                        wait_for(
                            lambda: cache.stats()["redis"]["hits"] > hits_after,
                            30,
                            "Redis hits after the restart",
                        ),
                        2,
                    )
                    outage["swap_after_restart_s"] = round(swap_once(), 2)
                outage.update(
                    redis_hits_before=redis_before,
                    local_misses_by_restart=encoded_during,
                    cache=cache.stats(),
                    hot_swapper=swapper.state(),
                )

                phases["fuzz"] = fuzz = {}
                with load.phase(fuzz):
                    fuzz.update(fuzz_phase(server.target, args.fuzz_requests, args.fuzz_seconds))
            finally:
                load.stop()
                swapper.close()
            served = server.server.served.engine.bundle.name
            check = final_check(server.target, bundles, served)
        cache.close()
    total = load.snapshot()
    failures = sum(p.get("failures", 0) for p in phases.values())
    result = {
        "benchmark": "service_soak",
        "rows": args.rows,
        "threads": args.threads,
        "encoder": "minilm (cpu)",
        "setup_s": round(setup_s, 1),
        "phases": phases,
        "requests": total.requests,
        "failures": total.failures,
        "bundle_versions_seen": sorted(total.versions),
        "final_check": check,
        "ok": total.failures == 0
        and failures == 0
        and check["ok"]
        and "error" not in phases["fuzz"],
    }
    return publish(result, args.json)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--threads", type=int, default=4, help="client threads")
    parser.add_argument("--swaps", type=int, default=10, help="versions published under load")
    parser.add_argument("--swap-gap-seconds", type=float, default=2.0, help="load between two")
    parser.add_argument("--outage-seconds", type=float, default=10.0, help="Redis held down")
    parser.add_argument("--warmup-seconds", type=float, default=3.0)
    parser.add_argument(
        "--cache-size",
        type=int,
        default=8,
        help="local LRU entries (small: the repeated queries then come from Redis)",
    )
    parser.add_argument("--fuzz-requests", type=int, default=10_000)
    parser.add_argument("--fuzz-seconds", type=float, default=300.0)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/service_soak.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="soak: %(levelname)s: %(name)s: %(message)s")
    result = run(args)
    if not result["ok"]:
        sys.exit(1)
    return result


if __name__ == "__main__":
    main()
