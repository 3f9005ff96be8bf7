"""The running top k of a scan that reads its rows block by block (the shared store's float
and integer scans, indexer/format/store/, and the benchmarks that scan as they do): merged a
block at a time, best first, ties by row, and padded to FAISS's answer shape. Pure functions.
"""

from __future__ import annotations

import numpy as np


def merge_top_k(
    best: tuple[np.ndarray, np.ndarray], scores: np.ndarray, rows: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The k best of (best scores [Q, k'], best rows) and a new block (scores [Q, n], rows
    [n]), best first, ties by row."""
    all_scores = np.concatenate([best[0], scores], axis=1)
    all_rows = np.concatenate([best[1], np.broadcast_to(rows, scores.shape)], axis=1)
    keep = min(k, all_scores.shape[1])
    if keep < all_scores.shape[1]:
        part = np.argpartition(-all_scores, keep - 1, axis=1)[:, :keep]
        all_scores = np.take_along_axis(all_scores, part, axis=1)
        all_rows = np.take_along_axis(all_rows, part, axis=1)
    order = np.lexsort((all_rows, -all_scores), axis=1)
    return np.take_along_axis(all_scores, order, axis=1), np.take_along_axis(
        all_rows, order, axis=1
    )


def pad(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """FAISS's answer shape [Q, k]: rows −1 and scores −inf past the last hit."""
    missing = k - scores.shape[1]
    if missing > 0:
        q = len(scores)
        scores = np.concatenate([scores, np.full((q, missing), -np.inf, np.float32)], axis=1)
        rows = np.concatenate([rows, np.full((q, missing), -1, np.int64)], axis=1)
    return scores.astype(np.float32), rows.astype(np.int64)
