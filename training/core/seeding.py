"""The one place a training run is seeded and made deterministic.

`seeded(seed)` wraps every train entry point (`train_grasp`, `train_cedar`, `train_sae`,
`train_coupled`, the crosscoder and the GraSP adapters): inside it python's `random`, numpy's
global generator and torch's (CPU and CUDA) start from `seed`, and torch runs its
deterministic algorithms. On leaving, everything is put back as it was, so a run leaves no state
behind for what comes after it (another test, another run in the same process).

What a run draws from its own generators (data order, k per batch, mined views and queries,
the ICA start, splits) is seeded from the same config seed where it is drawn; the global
generators seeded here catch whatever draws from them (module initialisers, sklearn without a
`random_state`).

Thread counts are pinned inside the block (and put back after): torch's to `training_threads()`
(`MAX_TRAINING_THREADS`, or fewer where the process may use fewer cores), numpy's BLAS to
`BLAS_THREADS`. Measured with `benchmarks.training.reproducibility` before the
pins, 1 thread against 2 changed the bytes of GraSP-VL (both recipes) and CEDAR (the reductions
split their sums by thread), though not those of CoSAE or the SAEs. What a fixed count cannot
remove is the CPU's instruction set (docs/how-to/reproduce.md).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

# torch threads of every training run: fixed on a machine, so the split of each reduction is
# too. Never more than the cores the process may use: torch's OpenMP threads wait for each other
# at every kernel, and 4 of them on 2 cores made GraSP-VL's 384-d Cayley solve 0.2 s, not 2 ms
# (an epoch of the demo's recipe on Flickr8k: 22 s at 4 threads, 9.6 s at 2, 11 s at 1)
MAX_TRAINING_THREADS = 4
# numpy's BLAS (OpenBLAS) threads inside a run: its PCA starts, gallery fits and naming sums
# split by thread too (measured: 1 thread against 2 moved CEDAR's weights by 1.84), and this
# work is small beside torch's, so one thread
BLAS_THREADS = 1


def training_threads() -> int:
    """Torch threads inside a training run: `MAX_TRAINING_THREADS`, or the usable cores."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(MAX_TRAINING_THREADS, usable or 1))


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed python, numpy and torch from `seed`, use torch's deterministic algorithms,
    `training_threads()` torch threads and `BLAS_THREADS` numpy BLAS threads inside the block;
    restore the generators' states, the determinism flag and the thread counts on exit.

    On CUDA some kernels have no deterministic version; there torch warns instead of raising
    (`warn_only`), so a GPU run is seeded but not guaranteed bit-identical."""
    import torch  # here, not at import: numpy users of training.core load no torch
    from threadpoolctl import threadpool_limits

    python_state, numpy_state = random.getstate(), np.random.get_state()
    torch_state = torch.random.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # CUDA's generators too
    torch.use_deterministic_algorithms(True, warn_only=torch.cuda.is_available())
    torch.set_num_threads(training_threads())
    try:
        with threadpool_limits(limits=BLAS_THREADS, user_api="blas"):
            yield
    finally:
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.set_num_threads(threads)
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        torch.random.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
