"""A worker's serving threads gathered on one core while its calls come one at a time, spread
once they overlap (service/serving/thread_placement.py), and the overlap counted on a live
gRPC server (service/api/grpc/call_overlap.py).

The rule is checked on counts built for it; the placement on this process's own threads, on
two cores it may use (skipped where it may use one); the count on calls the test makes overlap
by holding the encoder."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from http_helpers import call
from serving_helpers import HeldEncoder
from waiting import WAIT_S, wait_for

from indexer.format.bundle import Bundle
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient
from service.api.server import ServerConfig
from service.engine.compute_threads import process_cores, same_threads
from service.engine.search import SearchEngine
from service.serving.batching import BatchingConfig
from service.serving.metrics import ServerMetrics
from service.serving.thread_placement import (
    GATHER_AFTER,
    CallOverlap,
    Placement,
    ThreadPlacement,
    gathering_core,
    next_placement,
)


def windows(*counts: tuple[int, int]) -> Placement:
    placement = Placement()
    for calls, overlapped in counts:
        placement = next_placement(placement, calls, overlapped)
    return placement


def test_threads_gather_after_quiet_windows_and_spread_after_a_busy_one():
    quiet, busy = (100, 5), (100, 6)  # 5 % of the calls overlapping at most: quiet
    assert not windows(*[quiet] * (GATHER_AFTER - 1)).gathered
    assert windows(*[quiet] * GATHER_AFTER).gathered
    assert windows((0, 0), *[quiet] * (GATHER_AFTER - 1)).gathered  # no calls: quiet
    assert not windows(*[quiet] * GATHER_AFTER, busy).gathered
    assert not windows(*[quiet] * (GATHER_AFTER - 1), busy, quiet).gathered  # the run broken


def test_each_worker_gathers_on_a_core_of_its_own():
    cores = sorted(process_cores())
    assert [gathering_core(i) for i in range(len(cores))] == cores
    assert gathering_core(len(cores)) == cores[0]


def affinity(thread: int) -> frozenset[int]:
    return frozenset(os.sched_getaffinity(thread))


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(process_cores()) < 2,
    reason="needs thread affinity and two cores to move threads between",
)
def test_serving_threads_and_lanes_move_and_background_threads_keep_every_core():
    every, core = process_cores(), min(process_cores())
    started, stop = threading.Barrier(4), threading.Event()
    ids: dict[str, int] = {}

    def run(name: str, first=None) -> None:
        if first is not None:
            first()
        ids[name] = threading.get_native_id()
        started.wait()
        stop.wait()

    threads = [
        threading.Thread(target=run, args=("compute", same_threads())),
        threading.Thread(target=run, args=("serving",)),
        threading.Thread(target=run, args=("lane", same_threads(every_core=False))),
    ]
    for thread in threads:
        thread.start()
    metrics = ServerMetrics()
    placement = ThreadPlacement(core, CallOverlap(), metrics)
    try:
        started.wait()
        assert affinity(ids["serving"]) == affinity(0) == every  # the premise
        for _ in range(GATHER_AFTER):
            placement.observe(50, 0)
        assert affinity(ids["serving"]) == affinity(ids["lane"]) == affinity(0) == {core}
        assert affinity(ids["compute"]) == every
        assert metrics.registry.get_sample_value("strata_threads_gathered") == 1
        placement.observe(50, 40)
        assert affinity(ids["serving"]) == affinity(0) == every
        for _ in range(GATHER_AFTER):
            placement.observe(0, 0)
        assert affinity(0) == frozenset({core})
        placement.overlap.begin()
        assert affinity(0) == frozenset({core})  # one call at a time
        placement.overlap.begin()
        assert affinity(0) == every  # a call beside another: spread at once
        assert placement.overlap.overlapped == 1
        assert metrics.registry.get_sample_value("strata_threads_gathered") == 0
        assert metrics.registry.get_sample_value("strata_thread_moves_total") == 4
    finally:
        placement.stop()
        stop.set()
        for thread in threads:
            thread.join()
    assert affinity(0) == every


def test_calls_one_at_a_time_never_overlap_and_held_ones_do(text_bundle: Path, minilm):
    encoder = HeldEncoder(minilm, held=False)
    engine = SearchEngine(Bundle.open(text_bundle), encoder)
    config = ServerConfig(port=0, http_port=0, batching=BatchingConfig(lanes=1))
    texts = ["a dog", "a cat", "a red horse", "a bird"]
    with (
        BackgroundServer(engine, config) as server,
        StrataClient(server.target, timeout=WAIT_S) as client,
        ThreadPoolExecutor(len(texts) + 1) as pool,
    ):
        overlap = server.server.overlap
        base = f"http://{server.server.http_address}"
        for text in texts:  # each after the last has ended, its done callback run
            client.search(text, k=3)
            wait_for(lambda: overlap.in_flight == 0, WAIT_S, "the call ended")
        assert call(base, "/v1/search", {"query": {"text": "a fox"}, "topK": 3})[0] == 200
        assert (overlap.calls, overlap.overlapped, overlap.in_flight) == (len(texts) + 1, 0, 0)
        encoder.hold()
        searches = [pool.submit(client.search, f"{t} again", k=3) for t in texts]
        wait_for(
            lambda: encoder.arrived(1) and overlap.calls == 2 * len(texts) + 1,
            WAIT_S,
            "the held calls began",
        )
        status = pool.submit(call, base, "/v1/search", {"query": {"text": "a cow"}, "topK": 3})
        wait_for(lambda: overlap.calls == 2 * len(texts) + 2, WAIT_S, "the HTTP call began")
        encoder.release()
        for search in searches:
            assert search.result(WAIT_S).hits
        assert status.result(WAIT_S)[0] == 200
        wait_for(lambda: overlap.in_flight == 0, WAIT_S, "the held calls ended")
    assert overlap.overlapped == len(texts)  # each but the first began beside another
