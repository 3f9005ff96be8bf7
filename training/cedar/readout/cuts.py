"""Where each learnt word concept is cut: its threshold θ_w and held-out figures.

θ_w is picked per word on the train and val rows together (up to CALIBRATION_TRAIN_ROWS of the
train rows, a seeded sample: the readout is linear and fits its train rows no better than its
val rows, so they give a rare word's cut several times the positives): the cut of best F1
against the strict relevance (at least 2 other captions use w), where the word has at least
`min_calibration` relevant rows there and that cut, cross-fitted, holds out better than the
global one; elsewhere one global θ, the cut of best mean F1 over the words that have them. Each
word's held-out precision P(relevant | active) and recall, which the catalog shows, come from
cross-fitting: the val rows split in two halves by image, θ picked on the train rows and one
half, and scored on the other half, both ways. Pure functions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

CALIBRATION_TRAIN_ROWS = 30_000  # train rows that join the val rows in picking cuts
SORT_BLOCK = 256  # words whose scores global_cut sorts at once


def best_cuts(scores: np.ndarray, relevant: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per word (column): the threshold of best F1 (rows with score ≥ it are allowed; the
    midpoint between the last allowed and first refused score) and that F1. Exact: every cut
    between sorted scores (ties in row order) is tried. A word with no relevant row gets +inf
    and F1 0."""
    cuts, f1 = np.full(scores.shape[1], np.inf), np.zeros(scores.shape[1])
    for w in range(scores.shape[1]):
        cuts[w], f1[w] = word_cut(scores[:, w], relevant[:, w])
    return cuts, f1


def word_cut(scores: np.ndarray, relevant: np.ndarray) -> tuple[float, float]:
    """One word's best-F1 cut and its F1 (best_cuts). Only its top rows are ranked: allowing
    the R highest rows (R relevant) scores F1 f₀ = hits/R, and allowing k rows scores at most
    2R/(k + R), below f₀ once k > R(2/f₀ − 1), so no cut past those rows can be better."""
    n, wanted = len(scores), int(relevant.sum())
    if wanted == 0:
        return float("inf"), 0.0
    first = np.argpartition(-scores, wanted - 1)[:wanted] if wanted < n else np.arange(n)
    found = int(relevant[first].sum())
    at_edge = int((scores[first] == scores[first].min()).sum())
    if (scores == scores[first].min()).sum() > at_edge:  # a tie across the R-th row
        found = max(0, found - at_edge)  # count fewer hits: rank more rows
    reach = n if found == 0 else min(n, int(wanted * (2 * wanted / found - 1)) + 2)
    if reach < n:  # every row at or above the reach-th score: a prefix of the whole ranking
        top = np.flatnonzero(scores >= scores[np.argpartition(-scores, reach - 1)[reach - 1]])
    else:
        top = np.arange(n)
    top = top[np.lexsort((top, -scores[top]))]  # by score, ties in row order
    ranked = scores[top].astype(np.float64)
    f1 = 2 * np.cumsum(relevant[top], dtype=np.float64) / (np.arange(1, len(top) + 1) + wanted)
    best = int(np.argmax(f1))
    if best + 1 < len(top):
        below = ranked[best + 1]
    elif len(top) < n:  # the first row past the ranked ones
        below = float(np.max(scores[scores < ranked[-1]]))
    else:
        return float(ranked[best]), float(f1[best])
    return float((ranked[best] + below) / 2), float(f1[best])


def global_cut(scores: np.ndarray, relevant: np.ndarray, words: np.ndarray) -> float:
    """The one threshold of best mean F1 over `words` (columns), from a grid of score
    quantiles; each word's counts at every grid point read off its sorted scores."""
    if not len(words):
        return 0.0
    s, r = scores[:, words], relevant[:, words]
    grid = np.unique(np.quantile(s, np.linspace(0.5, 0.9999, 400)))
    allowed, hits = np.zeros((2, len(grid), len(words)))
    for first in range(0, len(words), SORT_BLOCK):
        block = np.ascontiguousarray(s[:, first : first + SORT_BLOCK].T)  # a word's scores a row
        wanted = np.ascontiguousarray(r[:, first : first + SORT_BLOCK].T)
        for i, column in enumerate(np.sort(block, axis=1)):
            allowed[:, first + i] = len(column) - np.searchsorted(column, grid, side="left")
            positives = np.sort(block[i][wanted[i]])
            hits[:, first + i] = len(positives) - np.searchsorted(positives, grid, side="left")
    f1 = (2 * hits / np.maximum(allowed + r.sum(axis=0), 1)).mean(axis=1)
    return float(grid[int(np.argmax(f1))])


def calibration_sample(rows: int, seed: int) -> np.ndarray:
    """int [S]: the train rows (positions, ascending) whose cuts join the val rows' in
    `calibrate`: every row up to CALIBRATION_TRAIN_ROWS, a seeded sample beyond."""
    if rows <= CALIBRATION_TRAIN_ROWS:
        return np.arange(rows)
    chosen = np.random.default_rng(seed).choice(rows, CALIBRATION_TRAIN_ROWS, replace=False)
    return np.sort(chosen)


def split_calibration(groups: Sequence[str], seed: int) -> np.ndarray:
    """bool per row: True for the first half of the val rows, False for the second (by group,
    so an image's captions stay together): the halves of the cross-fitting."""
    keys = [hashlib.sha256(f"{seed}:{g}".encode()).digest()[0] for g in groups]
    return np.array([k % 2 == 0 for k in keys], dtype=bool)


def thresholds(
    logits: np.ndarray, relevant: np.ndarray, min_calibration: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """θ per word from these rows: its own best-F1 cut where it has `min_calibration` relevant
    rows, else the global cut; (θ, own, the global cut)."""
    cuts, _ = best_cuts(logits, relevant)
    supported = relevant.sum(axis=0) >= min_calibration
    overall = global_cut(logits, relevant, np.flatnonzero(supported))
    return np.where(supported, cuts, overall), supported, overall


def held_out(
    logits: np.ndarray, relevant: np.ndarray, threshold: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hits, allowed, relevant) counts per word of θ on these rows."""
    allowed = logits >= threshold
    return (allowed & relevant).sum(axis=0), allowed.sum(axis=0), relevant.sum(axis=0)


def calibrate(
    logits: np.ndarray,
    relevant: np.ndarray,
    halves: np.ndarray,
    min_calibration: int,
    train: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, np.ndarray | float]:
    """θ per word on the val rows (`logits`, `relevant`) and the `train` rows' (logits,
    relevance) together, and each word's held-out precision / recall, by cross-fitting:
    thresholds picked on the train rows and one half of the val rows (by image) and scored on
    the other half, both ways, counts pooled (NaN where it allows or has no relevant row). A
    word keeps its own best-F1 cut only where it has `min_calibration` relevant rows and that
    cut, cross-fitted, scores a higher held-out F1 than the global cut does for the word;
    elsewhere the global cut, whose held-out figures it then reports. (A word the readout
    cannot separate still has a best cut on its few positives, often deep in its ranking: one
    that lets a large share of the rows through and holds on no other rows.)"""
    if train is None:
        train = (logits[:0], relevant[:0])
    train_logits, train_relevant = train
    fitted = np.concatenate([train_logits, logits]), np.concatenate([train_relevant, relevant])
    threshold, supported, overall = thresholds(*fitted, min_calibration)
    words = logits.shape[1]
    own_counts, global_counts = np.zeros((3, words)), np.zeros((3, words))
    fold_minimum = min_calibration if len(train_logits) else max(1, min_calibration // 2)
    for fit in (halves, ~halves):
        if not fit.any() or fit.all():
            continue
        theta, _, cut = thresholds(
            np.concatenate([train_logits, logits[fit]]),
            np.concatenate([train_relevant, relevant[fit]]),
            fold_minimum,
        )
        own_counts += held_out(logits[~fit], relevant[~fit], theta)
        global_counts += held_out(logits[~fit], relevant[~fit], np.full(words, cut))
    own = supported & (held_out_f1(*own_counts) > held_out_f1(*global_counts))
    hits, allowed, wanted = np.where(own, own_counts, global_counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(allowed > 0, hits / allowed, np.nan)
        recall = np.where(wanted > 0, hits / wanted, np.nan)
    return {
        "threshold": np.where(own, threshold, overall).astype(np.float32),
        "own": own,
        "global": overall,
        "precision": precision,
        "recall": recall,
    }


def held_out_f1(hits: np.ndarray, allowed: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """F1 per word from pooled counts (0 where nothing is allowed or relevant)."""
    total = allowed + wanted
    return np.where(total > 0, 2 * hits / np.maximum(total, 1), 0.0)
