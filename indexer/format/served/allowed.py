"""A search inside allowed rows, as each served index kind answers it
(`ServedIndex.search(x, k, params, allowed)`, indexer/format/served_index.py; the plan that
comes before it, blocks and exact scans, is service/engine/filtering.py's):

- the shared store scans the allowed rows (its mask);
- codes reranked from the store search their own codes inside the allowed rows for k·F
  candidates and rerank them exactly (indexer/format/store_rerank.py);
- a FAISS index skips the other rows through an ID selector passed in its search parameters
  (a refine passes it to its base), so approximate indexes filter during their traversal:
  an HNSW graph first tries the unfiltered search for a filter allowing a large share
  (`post_filtered`), else divides its efSearch by the filter's share (`filtered_ef`); an IVF
  divides its nprobe likewise (`filtered_nprobe`); and where the index stores its rows exactly,
  too few hits or a traversal wider than the allowed set gives way to an exact scan
  (indexer/format/served/mapped.py).
"""

from __future__ import annotations

import numpy as np

from indexer.format.served.flat import FlatStorage
from indexer.format.store.faiss_view import StoreIndex

EXACT_FALLBACK_MAX = 200_000
FILTERED_EF_MAX = 16_384  # no filtered HNSW search goes further (the exact scan, if any, does)
# an HNSW step reads ~13-32 rows at random (FAISS hnsw_stats: ndis/efSearch 32 at ef 100, 13 at
# ef 1,000), each costing about what an exact scan's gathered row costs; and a traversal that
# skips most rows misses some of a clustered filter's top k (a word on 9,378 of 250k rows: ef
# 640 recall@10 0.78 in 1.6 ms, the exact scan 1.0 in 2.8 ms), so the scan gets a wide margin
EXACT_ROWS_PER_EF = 32
# a filter allowing at least this share of the rows, on an HNSW index, first tries the
# unfiltered search for POST_FILTER_FETCH × k / share hits and keeps the allowed ones: at such a
# share the filtered traversal's efSearch / share costs up to 4× the unfiltered search (a word
# on 31 % of 1M rows: 2.0×), where the over-fetch costs about one unfiltered search
POST_FILTER_SHARE = 0.25
POST_FILTER_FETCH = 2


def exact_top(
    storage: FlatStorage | StoreIndex, query: np.ndarray, rows: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of `rows` by inner product with the stored vectors: ([1, k'], [1, k']) with
    k' = min(k, len(rows)), ties broken by row."""
    if len(rows) == 0:
        return np.zeros((1, 0), np.float32), np.zeros((1, 0), np.int64)
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    scores = storage.products(rows, np.asarray(query, dtype=np.float32).reshape(-1))
    if len(rows) > k:  # only the rows scoring at least the k-th best can be among the top k
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = np.flatnonzero(scores >= kth)
        scores, rows = scores[keep], rows[keep]
    order = np.lexsort((rows, -scores))[:k]
    return scores[order][None, :].astype(np.float32), rows[order][None, :]


def pad(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """FAISS's shape: [1, k], rows −1 and scores −inf past the last hit."""
    missing = k - scores.shape[1]
    if missing <= 0:
        return scores, rows
    return (
        np.concatenate([scores, np.full((1, missing), -np.inf, np.float32)], axis=1),
        np.concatenate([rows, np.full((1, missing), -1, np.int64)], axis=1),
    )


def filtered_ef(ef: int, wanted: int, share: float) -> int:
    """efSearch for an HNSW search that keeps only `share` of the rows: the unfiltered search's
    own max(ef, wanted), divided by the share, so that the traversal meets as many allowed rows
    as the unfiltered one meets rows (service/engine/filtering.py's docstring)."""
    return int(np.ceil(max(ef, wanted) / max(share, 1e-12) - 1e-9))


def filtered_nprobe(nprobe: int, nlist: int, share: float) -> int:
    """nprobe for an IVF search that keeps only `share` of the rows: the unfiltered nprobe
    divided by the share, at most every list. An IVF scan tests each entry of a probed list
    against the filter (one bit read) and scores only the allowed ones, whose vectors lie
    together in the list, so widening the probe costs little beside the scattered reads of an
    exact scan of the allowed rows."""
    return int(min(nlist, np.ceil(nprobe / max(share, 1e-12) - 1e-9)))
