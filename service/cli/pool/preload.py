"""What every worker of `strata serve --workers N` shares: imported once, in the process the
workers are forked from (multiprocessing's forkserver; service/cli/pool/parent.py).

Importing this module imports the server's heavy libraries and then freezes the garbage
collector's view of every object alive so far (`gc.freeze`): a worker's collections then never
write to those objects' headers, so the pages holding them stay shared with the other workers
instead of being copied into each one on its first full collection.
"""

from __future__ import annotations

import contextlib
import gc
import importlib

SHARED = (
    "numpy",
    "faiss",
    "grpc",
    "torch",
    "service.cli.pool.worker",
    "service.api.server",
    "service.cli.serve_setup",
    "service.engine.search",
    "service.query.cache",
    "training.core.encoders",
)

for _name in SHARED:
    with contextlib.suppress(ImportError):  # an optional library (torch, for some encoders)
        importlib.import_module(_name)
gc.collect()
gc.freeze()
