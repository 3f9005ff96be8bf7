"""How many threads the engine computes with: FAISS's OpenMP threads, the BLAS libraries'
(numpy's OpenBLAS, and the one FAISS calls for a batch of queries) and torch's.

A worker of `strata serve --workers N` takes its share of the cores (`limit_threads`); every
thread the engine then starts (the server's lanes, the open vocabulary's sketch) begins with
`same_threads()`, because OpenMP's count is a setting of each thread, and a new thread would
otherwise take one a core. With two workers on two cores, threads a core in each worker's
lanes spun against each other: the even text mix of benchmarks.service.workers went from 0.64×
one worker's QPS to 1.45× once both were held to the worker's share.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial


def limit_threads(threads: int) -> None:
    """This process's FAISS, BLAS and torch threads: `threads` each (BLAS's for the rest of
    the process; OpenMP's for this thread and those that start with `same_threads`)."""
    import faiss
    from threadpoolctl import threadpool_limits

    faiss.omp_set_num_threads(threads)
    threadpool_limits(limits=threads, user_api="blas")
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(threads)


def same_threads() -> Callable[[], None]:
    """What a new thread runs first to compute with as many OpenMP threads as the thread that
    calls this."""
    import faiss

    return partial(faiss.omp_set_num_threads, faiss.omp_get_max_threads())
