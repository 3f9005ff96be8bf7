"""Exact scores of chosen rows, read from where an index stores them: a filter's allowed rows
scored by their row ids (service/engine/filtering.py), without FAISS's search over every row."""

from __future__ import annotations

import faiss
import numpy as np

from indexer.format.prefix_index import exact_storage, stored_rows
from indexer.format.store.faiss_view import StoreIndex


def exact_scores(
    index: faiss.Index, query: np.ndarray, rows: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of `rows` by inner product with the stored vectors: ([1, k'], [1, k']) with
    k' = min(k, len(rows)), ties broken by row."""
    storage = exact_storage(index)
    if storage is None:
        raise RuntimeError("the index stores no exact vectors")
    if len(rows) == 0:
        return np.zeros((1, 0), np.float32), np.zeros((1, 0), np.int64)
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    scores = stored_products(storage, rows, np.asarray(query, dtype=np.float32).reshape(-1))
    if len(rows) > k:  # only the rows scoring at least the k-th best can be among the top k
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = np.flatnonzero(scores >= kth)
        scores, rows = scores[keep], rows[keep]
    order = np.lexsort((rows, -scores))[:k]
    return scores[order][None, :].astype(np.float32), rows[order][None, :]


def stored_products(
    storage: faiss.Index | StoreIndex, rows: np.ndarray, query: np.ndarray
) -> np.ndarray:
    """float32 [len(rows)]: the inner product of `query` [d] with the stored vectors of the
    int64 `rows`. On an IndexFlat, scored where they lie in its code array by FAISS
    (`fvec_inner_products_by_idx`: one pass, no copy of the rows first; a word on 37,077 of
    1M rows at 24 dims, `benchmarks.service.filters.filter_latency`: 7.8 → 5.6 ms a search); on the
    shared store, each head's product over its norm; else gathered, then multiplied."""
    if isinstance(storage, faiss.IndexFlat) and storage.ntotal:
        if rows.min() < 0 or rows.max() >= storage.ntotal:  # FAISS reads them unchecked
            raise IndexError(f"rows outside the {storage.ntotal} stored vectors")
        query = np.ascontiguousarray(query, dtype=np.float32)
        scores = np.empty(len(rows), dtype=np.float32)
        faiss.fvec_inner_products_by_idx(
            faiss.swig_ptr(scores),
            faiss.swig_ptr(query),
            storage.get_xb(),
            faiss.swig_ptr(rows),
            storage.d,
            1,
            len(rows),
        )
        return scores
    if isinstance(storage, StoreIndex):  # heads scored, then divided: VectorStore.prefix_scores
        return storage.store.prefix_scores(rows, storage.length, query)
    # einsum, not a BLAS gemv: a threaded gemv over a few thousand rows costs more in thread
    # hand-offs than the product (16 ms against 0.5 ms at 1,501 × 384 on a busy 2-core machine)
    return np.einsum("ij,j->i", stored_rows(storage, rows), query)
