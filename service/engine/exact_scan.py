"""Exact scores of chosen rows, read from where an index stores them: a filter's allowed rows
scored by their row ids (service/engine/filtering.py), without FAISS's search over every row.
The storage's own calls (`ExactStorage`, indexer/format/served_index.py) do the reading."""

from __future__ import annotations

import faiss
import numpy as np

from indexer.format.served.allowed import exact_top
from indexer.format.served_index import ExactStorage, ServedIndex, served


def exact_scores(
    index: ServedIndex | faiss.Index, query: np.ndarray, rows: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of `rows` by inner product with the stored vectors: ([1, k'], [1, k']) with
    k' = min(k, len(rows)), ties broken by row."""
    storage = served(index).exact
    if storage is None:
        raise RuntimeError("the index stores no exact vectors")
    return exact_top(storage, query, rows, k)


def stored_rows(storage: ExactStorage | faiss.Index, rows: np.ndarray) -> np.ndarray:
    """float32 [len(rows), d]: the stored vectors of `rows` in an exact storage (a bare FAISS
    flat index served as one)."""
    exact = served(storage).exact
    assert exact is not None
    return exact.rows(rows)
