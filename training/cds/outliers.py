"""High-norm outlier tokens and how much of a feature's activation sits on them. Pure functions.

ViTs trained at scale grow a few patch tokens of very large norm that carry global information
instead of their patch's content (Darcet et al. 2024, "Vision Transformers Need Registers"). A
feature read off such tokens is global even if its map is a single patch. Here:

- token norms ‖t_i‖₂ of every patch token after the chosen layer, over every crop of every
  image, form one histogram per model and layer;
- a token is an outlier when its norm exceeds

      τ = max(median + z · 1.4826 · MAD,  r · median)

  with MAD the median absolute deviation (1.4826·MAD estimates σ for normal data), z = 6 and
  r = 2 by default: far in the robust tail *and* at least twice the typical norm, so neither a
  tight nor a heavy-tailed bulk flags ordinary tokens;
- a feature's outlier share is Σ a_i·[i outlier] / Σ a_i over the patches of both crops of the
  images it is scored on (its top-m images): the share of its activation mass on outlier tokens.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

MAD_TO_SIGMA = 1.4826
DEFAULT_ROBUST_Z = 6.0
DEFAULT_RATIO = 2.0


@dataclass(frozen=True)
class OutlierRule:
    """The norm threshold τ and the histogram statistics it came from."""

    threshold: float
    median: float
    mad: float
    robust_z: float
    ratio: float
    outliers: int
    tokens: int

    @property
    def share(self) -> float:
        """Share of all tokens that are outliers."""
        return self.outliers / self.tokens if self.tokens else math.nan

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "share": self.share}


def token_norms(tokens: np.ndarray) -> np.ndarray:
    """‖t‖₂ over the last axis: tokens [..., width] → norms [...]."""
    return np.linalg.norm(np.asarray(tokens, dtype=np.float32), axis=-1)


def outlier_rule(
    norms: np.ndarray, robust_z: float = DEFAULT_ROBUST_Z, ratio: float = DEFAULT_RATIO
) -> OutlierRule:
    """τ = max(median + z·1.4826·MAD, r·median) over all the norms given (any shape)."""
    x = np.asarray(norms, dtype=np.float64).reshape(-1)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return OutlierRule(math.inf, math.nan, math.nan, robust_z, ratio, 0, 0)
    median = float(np.median(x))
    mad = float(np.median(np.abs(x - median)))
    threshold = max(median + robust_z * MAD_TO_SIGMA * mad, ratio * median)
    return OutlierRule(threshold, median, mad, robust_z, ratio, int((x > threshold).sum()), len(x))


def outlier_mask(norms: np.ndarray, rule: OutlierRule) -> np.ndarray:
    """True where a token's norm exceeds the rule's threshold (same shape as `norms`)."""
    return np.asarray(norms) > rule.threshold


def outlier_share(activations: np.ndarray, mask: np.ndarray) -> float:
    """Σ a·mask / Σ a over all entries (a clipped at 0); nan when there is no mass."""
    a = np.clip(np.asarray(activations, dtype=np.float64), 0.0, None)
    total = a.sum()
    if total <= 0:
        return math.nan
    return float((a * np.asarray(mask, dtype=bool)).sum() / total)


def outlier_positions(mask: np.ndarray, grid: int, top: int = 5) -> list[dict[str, Any]]:
    """The grid positions where outlier tokens occur most often: [{row, col, count}, ...].

    `mask` is [..., grid²] over flat row-major patch indices.
    """
    counts = np.asarray(mask, dtype=bool).reshape(-1, grid * grid).sum(axis=0)
    order = np.argsort(-counts, kind="stable")[:top]
    return [
        {"row": int(i // grid), "col": int(i % grid), "count": int(counts[i])}
        for i in order
        if counts[i] > 0
    ]
