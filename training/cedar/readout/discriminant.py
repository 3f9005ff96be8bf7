"""The readout's second reading of a word: its discriminant direction, from the rows whose own
caption uses it.

The logistic readout (training/cedar/readout/fitting.py) learns what an image's *other*
captions say, so a word seen on few images learns from few positives. The rows whose own
caption uses the word are several times as many, and what they share transfers to another
corpus: a sentence embedding carries the words of its sentence. Each word w gets Fisher's
linear discriminant between those rows and all the train rows, under one covariance for all
words:

    μ      = the mean x̃ of the train rows,  m_w = the mean x̃ of the rows whose caption uses w
    Σ_λ    = (1 − λ)·Σ + λ·(tr Σ / D)·I     Σ the train rows' covariance, λ the shrinkage
    d_w(x) = ⟨x̃ − μ, Σ_λ⁻¹ (m_w − μ)⟩

The served score of w is the two readings added in standard units, each standardised by its
mean and standard deviation on the train rows:

    s_w(x) = (logit_w(x) − a_w)/α_w + (d_w(x) − b_w)/β_w

Both are linear in x̃, so s_w is one weight row and one offset, and the artifact stores a
readout as before (training/cedar/readout/artifact.py); thresholds are then cut on s_w
(training/cedar/readout/cuts.py). Chosen on dev splits (`python -m
benchmarks.training.readout_cuts`, docs/explanation/cedar.md): on the Flickr8k val halves and the
compositional val rows alike the sum beat either reading alone. Pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import sparse

SHRINKAGE = 0.003  # λ, chosen on the dev splits (module doc)


def mention_matrix(mentions: Sequence[frozenset[int]], words: int) -> sparse.csr_matrix:
    """float32 [rows, words]: 1 where the row's own caption uses the word."""
    indptr = np.cumsum([0, *(len(m) for m in mentions)])
    indices = np.fromiter((w for m in mentions for w in sorted(m)), dtype=np.int64)
    data = np.ones(len(indices), dtype=np.float32)
    return sparse.csr_matrix((data, indices, indptr), shape=(len(mentions), words))


def discriminant_directions(
    x: np.ndarray, mentions: sparse.csr_matrix, shrinkage: float = SHRINKAGE
) -> tuple[np.ndarray, np.ndarray]:
    """(weight [V, D], offset [V]) of d_w (module doc) from the train rows `x` [N, D] and their
    mentions [N, V]; a word no row uses gets a zero direction."""
    if not 0 < shrinkage <= 1:
        raise ValueError(f"shrinkage must be in (0, 1], got {shrinkage}")
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(axis=0)
    centred = x - mean
    covariance = centred.T @ centred / max(len(x) - 1, 1)
    dim = covariance.shape[0]
    shrunk = (1 - shrinkage) * covariance + shrinkage * np.trace(covariance) / dim * np.eye(dim)
    counts = np.asarray(mentions.sum(axis=0)).reshape(-1)
    means = np.asarray(mentions.T @ centred) / np.maximum(counts, 1)[:, None]  # m_w − μ
    weight = np.linalg.solve(shrunk, means.T).T
    return weight.astype(np.float32), (-(weight @ mean)).astype(np.float32)


def standard_units(
    weight: np.ndarray, offset: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The same linear score rescaled to mean 0 and standard deviation 1 on `rows`, per word
    (a word whose score does not vary there is only centred)."""
    scores = np.asarray(rows, dtype=np.float64) @ weight.T.astype(np.float64) + offset
    mean, spread = scores.mean(axis=0), scores.std(axis=0)
    spread = np.where(spread > 0, spread, 1.0)
    return (weight / spread[:, None]).astype(np.float32), ((offset - mean) / spread).astype(
        np.float32
    )


def summed_in_standard_units(
    parts: Sequence[tuple[np.ndarray, np.ndarray]], rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(weight, offset) of the sum of the linear scores `parts`, each first put in standard
    units on `rows`."""
    scaled = [standard_units(w, b, rows) for w, b in parts]
    return (
        np.sum([w for w, _ in scaled], axis=0).astype(np.float32),
        np.sum([b for _, b in scaled], axis=0).astype(np.float32),
    )


def with_discriminant(
    logistic: tuple[np.ndarray, np.ndarray],
    x: np.ndarray,
    mentions: sparse.csr_matrix,
    shrinkage: float = SHRINKAGE,
) -> tuple[np.ndarray, np.ndarray]:
    """(weight, offset) of s_w (module doc): the `logistic` readout's (weight, offset) and the
    discriminant directions of the train rows `x` and their `mentions`, added in standard units
    on those rows."""
    return summed_in_standard_units([logistic, discriminant_directions(x, mentions, shrinkage)], x)
