"""How many threads the engine computes with: FAISS's OpenMP threads, the BLAS libraries'
(numpy's OpenBLAS, and the one FAISS calls for a batch of queries) and torch's.

Each worker of `strata serve --workers N` takes its share of the cores for FAISS and torch
(`limit_threads`); every serving process, one worker or many, runs numpy's BLAS on one thread
(`limit_blas`; a single server leaves FAISS and torch as OMP_NUM_THREADS or the cores say), and
so does any process that makes a SearchEngine (`engine_blas`).
The engine's matrix products are one query's or one batch's, small, and OpenBLAS keeps its
threads spinning for about 0.1 s after each call: on two cores that spin took the core the next
query's encoder (torch) needed: a text query (embedded, then searched) on the demo's
bundle took p50 21.6–27.2 ms, p90 86–129 ms, 31–47 of 120 queries past 50 ms with every library
on both cores; with numpy's BLAS on one thread (FAISS and torch on both), p50 9.4–11.4 ms, p90
10.4–12.5 ms, none past 17 ms (everything on one thread: 13.3–15.2 ms; three runs of `python -m
benchmarks.service.blas_spin`).
A BLAS built on OpenMP (FAISS's) follows OpenMP's count, whose idle threads sleep soon. Every
thread the engine then starts (the server's lanes, the open vocabulary's sketch) begins with
`same_threads()`, because OpenMP's count is a setting of each thread, and a new thread would
otherwise take one a core. With two workers on two cores, threads a core in each worker's
lanes spun against each other: the even text mix of benchmarks.service.workers went from 0.64×
one worker's QPS to 1.45× once both were held to the worker's share.
The background ones (version loads, the sketch) keep every core the process started with
(`process_cores`, `compute_thread_ids`) where a worker gathers its other threads, its lanes
included, onto one core while its calls come one at a time (service/serving/thread_placement.py).
Before a server listens, its first lane thread is started and makes the encoder's first text
call (`warm_lane`): that call's lazy set-up is the thread's own, and the server's first text
query paid it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from training.core.encoders import Encoder

BLAS_THREADS = 1  # a serving process's BLAS threads (module doc)
_PROCESS_CORES = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
_COMPUTE_THREADS: set[int] = set()  # threads begun with `same_threads()` on every core


def limit_threads(threads: int) -> None:
    """This process's FAISS and torch threads: `threads` each (OpenMP's for this thread and
    those that start with `same_threads`), and its BLAS's (`limit_blas`)."""
    import faiss

    limit_blas()
    faiss.omp_set_num_threads(threads)
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(threads)


def limit_blas() -> None:
    """BLAS_THREADS for every BLAS on threads of its own (numpy's), for the rest of the process
    (module doc); FAISS's OpenMP count as it was (FAISS's BLAS is built on OpenMP, and limiting
    it sets OpenMP's count too)."""
    import faiss
    from threadpoolctl import threadpool_limits

    threads = faiss.omp_get_max_threads()
    threadpool_limits(limits=BLAS_THREADS, user_api="blas")
    faiss.omp_set_num_threads(threads)


@cache
def engine_blas() -> None:
    """`limit_blas`, once a process: what making a SearchEngine does, so that an engine used
    in-process (`SearchEngine.open` from Python, the demo) computes as a served one does. With
    numpy's BLAS on every core, the spin after a funnel's small products took the cores its
    integer scan asked torch for: a full-granularity vector query on the demo's bundle took
    8.0 ms in-process against 2.3 ms so limited (two cores, `python -m
    benchmarks.service.blas_spin --kind vector`). Once: a caller who raises BLAS's count again
    afterwards keeps it."""
    limit_blas()


def same_threads(every_core: bool = True) -> Callable[[], None]:
    """What a new thread runs first to compute with as many OpenMP threads as the thread that
    calls this; with `every_core`, on every core of `process_cores`, as a background compute
    thread (module doc). Without, the thread stays on the cores it inherits: a server's lanes,
    which go where its serving threads go."""
    import faiss

    count = faiss.omp_get_max_threads()

    def begin() -> None:
        faiss.omp_set_num_threads(count)
        if not every_core:
            return
        _COMPUTE_THREADS.add(threading.get_native_id())
        if _PROCESS_CORES is not None:  # it inherits its starter's cores, maybe one only
            with contextlib.suppress(OSError):  # cores taken from the process since it started
                os.sched_setaffinity(0, _PROCESS_CORES)

    return begin


def process_cores() -> frozenset[int]:
    """The cores this process could run on when it started (when this module was first
    imported)."""
    return _PROCESS_CORES if _PROCESS_CORES is not None else frozenset({0})


def compute_thread_ids() -> frozenset[int]:
    """The native ids of the threads begun with `same_threads()` on every core (a thread that
    has ended may still be named)."""
    return frozenset(_COMPUTE_THREADS)


WARM_TEXT = "a photo"  # embedded once on the first lane before a server listens


def warm_lane(executor: Executor, encoder: Encoder | None) -> None:
    """Make the encoder's first text call on the executor's first lane thread (started by it):
    the first call on a thread pays the model's lazy set-up there (8.6 ms with MiniLM on two
    cores, `python -m benchmarks.service.first_text`), which a server's first text query paid
    before. One lane only: an idle pool hands each task to its longest-idle thread, so once two
    lanes exist, one client's queries alternate between them, and with torch on more than one
    thread (a single server) each lane's OpenMP team spins while the other's computes (5 ms a
    query in `first_text --workers 1` with both lanes warmed). A second lane is started, and
    pays its own set-up, when two queries first overlap. A hot swap keeps the encoder."""
    if encoder is not None:
        executor.submit(encoder.encode_text, [WARM_TEXT]).result()
