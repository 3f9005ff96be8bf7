"""The engine's compute threads: a worker's share of the cores holds in every thread it starts
(service/engine/compute_threads.py). The premise is built in: the count set here is one more
than OpenMP's default, so a thread that did not take it differs on any machine."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import faiss
import pytest

from service.api.server import StrataServer
from service.engine.compute_threads import same_threads
from service.engine.search import SearchEngine
from service.serving.daemon_work import on_daemon_thread


@pytest.fixture
def threads_set() -> Iterator[int]:
    """This thread's OpenMP count set to one more than a new thread's default, then restored."""
    before = faiss.omp_get_max_threads()
    default: list[int] = []
    probe = threading.Thread(target=lambda: default.append(faiss.omp_get_max_threads()))
    probe.start()
    probe.join()
    faiss.omp_set_num_threads(default[0] + 1)
    try:
        yield default[0] + 1
    finally:
        faiss.omp_set_num_threads(before)


def in_new_thread(first: Callable[[], None] | None = None) -> int:
    """OpenMP's count in a new thread, after `first` if given."""
    found: list[int] = []

    def run() -> None:
        if first is not None:
            first()
        found.append(faiss.omp_get_max_threads())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return found[0]


def test_a_thread_started_with_same_threads_takes_its_starters_count(threads_set: int):
    assert in_new_thread() == threads_set - 1  # the default: the premise
    assert in_new_thread(same_threads()) == threads_set


def test_the_servers_lanes_and_daemon_work_compute_with_the_workers_count(
    threads_set: int, engine: SearchEngine
):
    server = StrataServer(engine)
    try:
        lanes = {server.executor.submit(faiss.omp_get_max_threads).result() for _ in range(4)}
    finally:
        server.executor.shutdown()
    assert lanes == {threads_set}

    async def loaded() -> int:
        return await on_daemon_thread(faiss.omp_get_max_threads)

    assert asyncio.run(loaded()) == threads_set


def thread_counts(setup: str) -> tuple[int, int, list[int]]:
    """In a process of its own (thread limits last for the process): after `setup`, FAISS's
    OpenMP count, torch's, and the counts of the BLAS libraries on threads of their own (numpy's;
    one built on OpenMP follows OpenMP's)."""
    script = (
        "import json, numpy, faiss, torch, threadpoolctl\n"
        "from service.engine.compute_threads import limit_blas, limit_threads\n"
        f"{setup}\n"
        "print(json.dumps([faiss.omp_get_max_threads(), torch.get_num_threads(), "
        "[p['num_threads'] for p in threadpoolctl.threadpool_info() "
        "if p['user_api'] == 'blas' and p.get('threading_layer') != 'openmp']]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    omp, torch_threads, blas = json.loads(out.stdout.strip().splitlines()[-1])
    assert blas, "no BLAS on threads of its own: numpy's was expected"
    return omp, torch_threads, blas


def test_a_workers_limit_holds_blas_too():
    """limit_threads(1): FAISS, torch and every BLAS (numpy's, FAISS's) run one thread."""
    omp, torch_threads, blas = thread_counts("limit_threads(1)")
    assert (omp, torch_threads) == (1, 1) and all(count == 1 for count in blas)


def test_a_server_computes_on_its_share_and_runs_blas_on_one_thread():
    """limit_threads(2): FAISS's and torch's counts are 2, numpy's BLAS 1 (its threads spin after
    each call and would take the cores the encoder needs)."""
    omp, torch_threads, blas = thread_counts("limit_threads(2)")
    assert (omp, torch_threads) == (2, 2) and all(count == 1 for count in blas)


def test_a_single_server_limits_blas_and_keeps_faiss_and_torch_as_set():
    """limit_blas with OpenMP's and torch's counts set to 2 first (the premise, as
    OMP_NUM_THREADS would): they keep 2 (FAISS's OpenMP-built BLAS would reset OpenMP's count),
    numpy's BLAS runs 1."""
    omp, torch_threads, blas = thread_counts(
        "faiss.omp_set_num_threads(2); torch.set_num_threads(2); limit_blas()"
    )
    assert (omp, torch_threads) == (2, 2) and all(count == 1 for count in blas)


def test_an_engine_made_in_process_runs_blas_on_one_thread_and_keeps_faiss_and_torch(
    text_bundle: Path,
):
    """SearchEngine limits numpy's BLAS as a server does (engine_blas), from a process whose
    every library was set to 2 threads first (the premise, checked without the engine)."""
    every = (
        "threadpoolctl.threadpool_limits(limits=2, user_api='blas'); "
        "faiss.omp_set_num_threads(2); torch.set_num_threads(2)"
    )
    assert all(count == 2 for count in thread_counts(every)[2])  # the premise
    opened = (
        f"{every}\n"
        "from indexer.format.bundle import Bundle\n"
        "from service.engine.search import SearchEngine\n"
        f"SearchEngine(Bundle.open({str(text_bundle)!r}), None)"
    )
    omp, torch_threads, blas = thread_counts(opened)
    assert (omp, torch_threads) == (2, 2) and all(count == 1 for count in blas)
