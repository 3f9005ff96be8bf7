"""The project's metric definitions (design.md), one implementation for every method.

All inputs are rotated embeddings (rows), already passed through an artifact; s_ℓ(x, y) is the
cosine of the first ℓ coordinates. Pure functions on arrays.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from training.granularity import Contract, Granularity, previous_prefix

# The prefix each hard-negative type must be separated at (design.md).
NEGATIVE_LEVELS: dict[str, Granularity] = {
    "object": Granularity.OBJECT,
    "attribute": Granularity.ATTRIBUTE,
    "relation": Granularity.RELATION,
    "order": Granularity.CAPTION,
}
CHANCE = 0.5  # HN "before the object prefix", where nothing can separate anything


def prefix_cosine(a: np.ndarray, b: np.ndarray, length: int) -> np.ndarray:
    """s_ℓ(a_i, b_i) for every row i: cosine of the first `length` coordinates (0 for zero rows)."""
    x = np.asarray(a, dtype=np.float64)[:, :length]
    y = np.asarray(b, dtype=np.float64)[:, :length]
    norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    return np.einsum("ij,ij->i", x, y) / np.maximum(norms, 1e-12)


def hard_negative_accuracy(
    anchor: np.ndarray, positive: np.ndarray, negative: np.ndarray, length: int
) -> float:
    """HN at one prefix: share of triples with s_ℓ(anchor, positive) > s_ℓ(anchor, negative)."""
    wins = prefix_cosine(anchor, positive, length) > prefix_cosine(anchor, negative, length)
    return float(wins.mean())


def hard_negative_table(
    anchor: np.ndarray,
    positive: np.ndarray,
    negatives: Mapping[str, np.ndarray],
    lengths: list[int],
) -> dict[str, dict[int, float]]:
    """HN(t, ℓ) for every negative type t and prefix length ℓ."""
    return {
        kind: {n: hard_negative_accuracy(anchor, positive, neg, n) for n in lengths}
        for kind, neg in negatives.items()
    }


def _hn_at(table: Mapping[str, Mapping[int, float]], kind: str, length: int) -> float:
    return CHANCE if length == 0 else table[kind][length]


def selectivity(table: Mapping[str, Mapping[int, float]], contract: Contract) -> float:
    """Mean over types of HN(t, L(t)), each type at its assigned prefix."""
    kinds = [k for k in table if k in NEGATIVE_LEVELS]
    return float(np.mean([table[k][contract[NEGATIVE_LEVELS[k]]] for k in kinds]))


def staircase(table: Mapping[str, Mapping[int, float]], contract: Contract) -> float:
    """100 × mean over types of [HN(t, L(t)) − HN(t, the prefix before L(t))], 0.5 before D/16."""
    steps = []
    for kind in (k for k in table if k in NEGATIVE_LEVELS):
        level = NEGATIVE_LEVELS[kind]
        before = previous_prefix(contract, level)
        steps.append(table[kind][contract[level]] - _hn_at(table, kind, before))
    return float(100 * np.mean(steps))


def drift(
    before_a: np.ndarray, before_b: np.ndarray, after_a: np.ndarray, after_b: np.ndarray
) -> float:
    """max over pairs of |full-length cosine after − before|."""
    dim_before, dim_after = before_a.shape[1], after_a.shape[1]
    change = prefix_cosine(after_a, after_b, dim_after) - prefix_cosine(
        before_a, before_b, dim_before
    )
    return float(np.abs(change).max()) if change.size else 0.0


def fraction_of_variance_unexplained(x: np.ndarray, reconstruction: np.ndarray) -> float:
    """FVU = Σ‖x − x̂‖² / Σ‖x − x̄‖² over the evaluation set (dataset level)."""
    x = np.asarray(x, dtype=np.float64)
    residual = np.square(x - np.asarray(reconstruction, dtype=np.float64)).sum()
    total = np.square(x - x.mean(axis=0)).sum()
    return float(residual / total) if total > 0 else 0.0
