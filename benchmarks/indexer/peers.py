"""hnswlib (PyPI `hnswlib`), a peer engine beside Qdrant's in the benchmarks: an HNSW32 index
over the full vectors, its size, and single-query search (`pip install '.[bench]'`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

# as hnswlib's users build it: the ef_construction its own docs use (200; Qdrant's default is
# 100, FAISS's HNSW32 40, which caps the graph's recall below what the search's ef can buy)
M, EF_CONSTRUCTION = 32, 200


def hnswlib_index(rows: np.ndarray, threads: int = -1):
    """An inner-product hnswlib HNSW (M = 32, ef_construction = 200) over the rows, ids = row
    positions; (index, build seconds)."""
    import hnswlib

    index = hnswlib.Index(space="ip", dim=rows.shape[1])
    started = time.perf_counter()
    index.init_index(max_elements=len(rows), M=M, ef_construction=EF_CONSTRUCTION)
    index.add_items(rows, np.arange(len(rows)), num_threads=threads)
    return index, time.perf_counter() - started


def hnswlib_bytes(index, folder: Path) -> int:
    """The index's size as hnswlib saves it (vectors + graph), which it holds in RAM too."""
    path = folder / "hnswlib.bin"
    index.save_index(str(path))
    size = path.stat().st_size
    path.unlink()
    return size


def hnswlib_search(index, ef: int, k: int) -> Callable[[np.ndarray], np.ndarray]:
    """Single-query search at efSearch = ef (one thread): the k best row ids."""
    index.set_num_threads(1)

    def search(query: np.ndarray) -> np.ndarray:
        index.set_ef(max(ef, k))
        labels, _ = index.knn_query(query[None, :], k=k)
        return labels[0].astype(np.int64)

    return search
