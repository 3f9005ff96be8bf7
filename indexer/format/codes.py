"""CEDAR codes of gallery rows, straight into a postings run. Pure functions.

`ConceptCoder.encode` (training/cedar) gives each row's k active concepts strongest first: an
argpartition of −|z| (an index array as large as the block) and a sort of the k survivors. The
build needs less — which k axes are active in each row, their signs and |values|, grouped by
concept — so it does this instead, for a block of rows x:

    z      = (x − b) @ Uᵀ                   the expression sparse_codes uses (the same bits)
    t_r    = the k-th largest |z_r·|         np.partition of |z|: values only, no index array
    active = |z| ≥ t_r                      exactly k per row, unless |values| tie at t_r

A row with more than k coordinates at or above t_r (a tie at the threshold: an all-zero row,
repeated values) takes its k axes from the argpartition sparse_codes runs, so the active set is
always the one `ConceptCoder.encode` chooses. The entries (row, concept 2j + [z < 0], |z|) are
then grouped by concept with one stable counting sort of 16-bit concept ids (numpy's radix
sort), which keeps rows ascending within a concept: a postings run (indexer/format/postings.py).

Word concepts. With a vocabulary readout (training.cedar.readout: `ConceptCoder.word_margins`),
each block also contributes (row, 2D + w, margin) for every word w whose margin is ≥ 0 on the
row — the concept "w" of the catalog — after the block's axis entries; the same sort groups
them, after the 2D axis concepts.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from indexer.format.postings import PostingRun
from training.core.errors import InputError

CODE_BATCH = 8192  # rows coded at a time: z, |z| and the mask are ~9 bytes per cell


def check_codable(x: np.ndarray, dim: int) -> None:
    """The refusals of ConceptCoder.encode: rows of the coder's dimension, finite."""
    if x.ndim != 2 or x.shape[1] != dim:
        raise InputError(f"expected embeddings of shape [N, {dim}], got {x.shape}")
    if not np.isfinite(x).all():
        raise InputError("embeddings hold NaN or Inf")


def cedar_rotate(x: np.ndarray, rotation: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """z = (x − b) @ Uᵀ, float32 [n, D] — written as training.cedar.sparse_codes writes it."""
    return (np.asarray(x, dtype=np.float32) - mean) @ np.asarray(rotation, dtype=np.float32).T


def top_k_mask(magnitudes: np.ndarray, k: int) -> np.ndarray:
    """bool [n, D]: the k largest of each row of `magnitudes` (|z|, finite, ≥ 0).

    Ties at a row's threshold are broken exactly as sparse_codes breaks them (its argpartition
    of −|z| over that row), so the chosen set is always the coder's."""
    n, dim = magnitudes.shape
    if not 1 <= k <= dim:
        raise ValueError(f"k must be between 1 and the dimension {dim}, got {k}")
    if n == 0:
        return np.zeros((0, dim), dtype=bool)
    threshold = np.partition(magnitudes, dim - k, axis=1)[:, dim - k : dim - k + 1]
    mask = magnitudes >= threshold
    tied = np.flatnonzero(np.count_nonzero(mask, axis=1) != k)
    if len(tied):
        axes = np.argpartition(-magnitudes[tied], k - 1, axis=1)[:, :k]
        mask[tied] = False
        mask[tied[:, None], axes] = True
    return mask


def concept_dtype(n_concepts: int) -> type[np.signedinteger]:
    """int16 when the ids fit (numpy sorts 16-bit keys stably with a radix sort), else int32."""
    return np.int16 if n_concepts <= np.iinfo(np.int16).max + 1 else np.int32


def block_entries(
    x: np.ndarray, rotation: np.ndarray, mean: np.ndarray, k: int, n_concepts: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row within the block int64, concept id, activation float32) of every active concept of
    every row of x, in row-major order (a row's concepts by ascending axis)."""
    z = cedar_rotate(x, rotation, mean)
    n, dim = z.shape
    magnitudes = np.abs(z)
    flat = np.flatnonzero(top_k_mask(magnitudes, k))  # row-major: exactly k per row
    rows = np.repeat(np.arange(n, dtype=np.int64), k)
    axes = flat - rows * dim
    concepts = (2 * axes + (z.ravel()[flat] < 0)).astype(concept_dtype(n_concepts))
    return rows, concepts, magnitudes.ravel()[flat]


def word_entries(
    word_margins: np.ndarray, first_concept: int, n_concepts: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row within the block, concept first_concept + w, margin) where a margin is ≥ 0, in
    row-major order."""
    rows, words = np.nonzero(word_margins >= 0)
    concepts = (words + first_concept).astype(concept_dtype(n_concepts))
    return rows.astype(np.int64), concepts, word_margins[rows, words].astype(np.float32)


def code_run(
    x: np.ndarray,
    rotation: np.ndarray,
    mean: np.ndarray,
    k: int,
    first_row: int,
    batch: int = CODE_BATCH,
    words: Callable[[np.ndarray], np.ndarray] | None = None,
) -> PostingRun:
    """The postings run of rows first_row, first_row + 1, ... whose embeddings are x [n, D]:
    the run `shard_postings` makes of `ConceptCoder.encode`'s codes of the same blocks of
    `batch` rows (BLAS may round a product differently in the last bit for another number of
    rows; verification allows for that). The blocks bound the temporaries; the run itself is
    n·k axis entries, then (with `words`, a block's word margins [n, V]: ConceptCoder.
    word_margins) one entry per active word of each row."""
    x = np.asarray(x)  # widened to float32 block by block
    n, dim = x.shape
    n_words = 0 if words is None else words(x[:0]).shape[1]
    n_concepts = 2 * dim + n_words
    parts = []
    for start in range(0, n, batch):
        block = x[start : start + batch]
        part = block_entries(block, rotation, mean, k, n_concepts)
        if words is not None:
            extra = word_entries(words(block), 2 * dim, n_concepts)
            part = tuple(np.concatenate(pair) for pair in zip(part, extra, strict=True))
        parts.append(part)
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return PostingRun(np.zeros(n_concepts, np.int64), empty, np.zeros(0, np.float32))
    rows = np.concatenate(
        [p[0] + start for p, start in zip(parts, range(0, n, batch), strict=True)]
    )
    concepts = np.concatenate([p[1] for p in parts])
    values = np.concatenate([p[2] for p in parts])
    order = np.argsort(concepts, kind="stable")  # radix sort: rows stay ascending per concept
    rows = rows[order]
    rows += first_row
    return PostingRun(
        counts=np.bincount(concepts, minlength=n_concepts).astype(np.int64),
        rows=rows,
        values=values[order],
    )
