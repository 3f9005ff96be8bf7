"""The mathematics of CDS: ground cost, EMD between activation maps, the score, scope rules, AUC.

Pure functions over numpy arrays; no model, no files.

A feature's activation map on the shared (p − s) × (p − s) patches of two crops is a vector
a ∈ R^S, S = (p − s)², a ≥ 0 (negative values are clipped to 0). Its distribution is
â = a / Σ a; a map of zero mass has no distribution (the feature is inactive there). Patch
(r, c) of the shared grid has its centre at (r, c) in patch units, and the ground cost is

    C[i, j] = ‖centre(i) − centre(j)‖₂          (Euclidean, in patches)

The Earth Mover's Distance EMD(â, b̂) = min over couplings π ≥ 0 with marginals â and b̂ of
Σ π_ij C_ij (exact, POT's network simplex `ot.emd2`), so an identical map is at 0, and a point
mass moved by δ patches is at ‖δ‖. The contextual dependency score of a feature over the images
x₁ … x_m it is scored on (its top-m activating images, `training.cds.score`):

    CDS = (1/m) Σ_i EMD(â(x_i, A), â(x_i, B)) / (√2 · (p − s − 1))

The divisor is the shared grid's diagonal, the largest distance between two of its patch
centres, so CDS ∈ [0, 1]. A feature that is a function of its patch's pixels has the same map
on the shared patches of both crops (they hold the same pixels) and CDS = 0; a map fixed to the
grid rather than to the pixels moves by s patches along the diagonal, CDS = s / (p − s − 1).

Scope: "local" if CDS < t else "global", with t from the CDS histogram (`choose_threshold`):
Otsu's threshold when the histogram is bimodal by Sarle's bimodality coefficient, else the
median (the default, "auto"), or a rule the user picks: otsu, median, gmm (a two-Gaussian
mixture's posterior crossing) or a fixed number.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import ot

from training.core.errors import InputError

BIMODALITY_CUTOFF = 5 / 9  # Sarle's coefficient of a uniform distribution; above it: bimodal
MIN_FOR_OTSU = 8  # fewer finite scores than this: the histogram says nothing, use the median
THRESHOLD_RULES = ("auto", "otsu", "median", "gmm")


def patch_centres(side: int) -> np.ndarray:
    """[side², 2] centres (row, col) of a side × side patch grid, in patches, row-major."""
    if side < 1:
        raise ValueError(f"a patch grid needs side >= 1, got {side}")
    rows, cols = np.divmod(np.arange(side * side), side)
    return np.stack([rows, cols], axis=1).astype(np.float64)


def ground_cost(side: int) -> np.ndarray:
    """[side², side²] Euclidean distances between patch centres: C_ij = ‖c_i − c_j‖₂."""
    centres = patch_centres(side)
    return np.sqrt(((centres[:, None, :] - centres[None, :, :]) ** 2).sum(axis=-1))


def grid_diagonal(side: int) -> float:
    """√2 · (side − 1): the largest distance between two patch centres of the grid."""
    if side < 2:
        raise ValueError(f"the grid diagonal needs side >= 2, got {side}")
    return math.sqrt(2.0) * (side - 1)


def as_distribution(activation: np.ndarray) -> np.ndarray | None:
    """â = max(a, 0) / Σ max(a, 0) as float64, or None when the map has no positive mass."""
    a = np.clip(np.asarray(activation, dtype=np.float64).reshape(-1), 0.0, None)
    mass = a.sum()
    if not np.isfinite(mass) or mass <= 0.0:
        return None
    return a / mass


def earth_movers_distance(a: np.ndarray, b: np.ndarray, cost: np.ndarray) -> float:
    """EMD between two maps (normalised here) under the ground cost [S, S].

    Only the patches where a map has mass enter the transport problem (the others carry no
    mass), which keeps POT's exact solver small for sparse maps. ValueError if a map is empty.
    """
    pa, pb = as_distribution(a), as_distribution(b)
    if pa is None or pb is None:
        raise ValueError("EMD needs two maps with positive mass")
    if cost.shape != (len(pa), len(pb)):
        raise ValueError(f"cost must be [{len(pa)}, {len(pb)}], got {cost.shape}")
    ia, ib = np.flatnonzero(pa), np.flatnonzero(pb)
    wa, wb = pa[ia] / pa[ia].sum(), pb[ib] / pb[ib].sum()
    if len(ia) == 1 or len(ib) == 1:  # one side is a point mass: every coupling is forced
        return float(wa @ cost[np.ix_(ia, ib)] @ wb)
    return float(ot.emd2(wa, wb, np.ascontiguousarray(cost[np.ix_(ia, ib)])))


def contextual_dependency_score(
    maps_a: np.ndarray, maps_b: np.ndarray, side: int
) -> tuple[float, int]:
    """(CDS, images used) of one feature from its shared-patch maps [m, side²] in both crops.

    CDS = mean_i EMD(â_i, b̂_i) / grid_diagonal(side) over the images i where both maps have
    positive mass; (nan, 0) when there is none.
    """
    a = np.asarray(maps_a, dtype=np.float64)
    b = np.asarray(maps_b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2 or a.shape[1] != side * side:
        raise ValueError(f"need two [m, {side * side}] map stacks, got {a.shape} and {b.shape}")
    cost = ground_cost(side)
    distances = [
        earth_movers_distance(x, y, cost)
        for x, y in zip(a, b, strict=True)
        if as_distribution(x) is not None and as_distribution(y) is not None
    ]
    if not distances:
        return math.nan, 0
    return float(np.mean(distances)) / grid_diagonal(side), len(distances)


# -- the scope threshold ----------------------------------------------------------------------
@dataclass(frozen=True)
class Threshold:
    """The CDS threshold between local and global scope, and how it was chosen.

    `rule` is the rule applied (otsu | median | fixed), `requested` what the user asked for
    (auto | otsu | median | a number), `bimodality` Sarle's coefficient of the scores (None when
    undefined), `reason` one sentence saying why this rule.
    """

    value: float
    rule: str
    requested: str
    bimodality: float | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def bimodality_coefficient(values: np.ndarray) -> float:
    """Sarle's bimodality coefficient BC = (g₁² + 1) / (g₂ + 3(n − 1)² / ((n − 2)(n − 3))).

    g₁ and g₂ are the sample skewness and excess kurtosis with the usual small-sample
    corrections. BC > 5/9 (a uniform distribution's value) suggests two modes. nan when n < 4 or
    the values are constant.
    """
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    if n < 4:
        return math.nan
    centred = x - x.mean()
    m2 = (centred**2).mean()
    if m2 <= 0:
        return math.nan
    m3, m4 = (centred**3).mean(), (centred**4).mean()
    g1 = m3 / m2**1.5 * math.sqrt(n * (n - 1)) / (n - 2)
    g2 = ((n + 1) * (m4 / m2**2 - 3) + 6) * (n - 1) / ((n - 2) * (n - 3))
    return float((g1**2 + 1) / (g2 + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3))))


def otsu_threshold(values: np.ndarray, bins: int = 64) -> float:
    """Otsu's threshold on the histogram of `values` (`bins` equal bins over [min, max]).

    The bin edge t maximising the between-class variance ω₀ω₁(μ₀ − μ₁)² of the classes
    {v < t} and {v ≥ t}; when several edges tie (empty bins between the classes), the mean of
    the tied edges, i.e. the middle of the gap. nan when the values are constant or empty.
    """
    x = np.asarray(values, dtype=np.float64)
    if len(x) == 0 or x.min() == x.max():
        return math.nan
    counts, edges = np.histogram(x, bins=bins)
    centres = (edges[:-1] + edges[1:]) / 2
    weights = counts / counts.sum()
    omega0 = np.cumsum(weights)[:-1]  # class 0 = bins 0..k, for k = 0 .. bins − 2
    mu_cum = np.cumsum(weights * centres)[:-1]
    mu_total = float((weights * centres).sum())
    omega1 = 1.0 - omega0
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (mu_total * omega0 - mu_cum) ** 2 / (omega0 * omega1)
    between[(omega0 <= 0) | (omega1 <= 0)] = -np.inf
    best = np.flatnonzero(between >= between.max() * (1 - 1e-9))  # a plateau over an empty gap
    return float(edges[best + 1].mean())


def gmm_threshold(values: np.ndarray, seed: int = 0) -> float:
    """Where a two-component 1-D Gaussian mixture's posteriors cross between its two means.

    EM (scikit-learn, 3 initialisations, variance floor 1e-6); the threshold is the first point
    of a 2001-step grid from the lower to the higher mean where the higher component's
    posterior reaches 1/2. nan when there are fewer than 2 distinct values.
    """
    from sklearn.mixture import GaussianMixture

    x = np.asarray(values, dtype=np.float64).reshape(-1, 1)
    if len(np.unique(x)) < 2:
        return math.nan
    mixture = GaussianMixture(2, random_state=seed, n_init=3).fit(x)
    means = mixture.means_.ravel()
    grid = np.linspace(means.min(), means.max(), 2001).reshape(-1, 1)
    posterior = mixture.predict_proba(grid)[:, int(np.argmax(means))]
    return float(grid[int(np.argmax(posterior >= 0.5)), 0])


def choose_threshold(values: np.ndarray, rule: str = "auto", bins: int = 64) -> Threshold:
    """The CDS threshold by `rule`: auto | otsu | median | gmm | a number (fixed).

    auto: Otsu's threshold when there are at least 8 finite scores and Sarle's bimodality
    coefficient exceeds 5/9, else the median. otsu: Otsu's threshold whatever the shape (the
    median if the scores are constant). gmm: the posterior crossing of a two-component Gaussian
    mixture (`gmm_threshold`; the median if the scores are constant). NaN scores (features
    never active) are left out.
    """
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    requested = str(rule).strip().lower()
    bc = bimodality_coefficient(x) if len(x) else math.nan
    bimodality = None if math.isnan(bc) else round(bc, 6)
    if requested not in THRESHOLD_RULES:
        try:
            fixed = float(requested)
        except ValueError:
            raise InputError(
                f"unknown threshold rule {rule!r}; expected auto, otsu, median or a number"
            ) from None
        if not math.isfinite(fixed):
            raise InputError(f"a fixed threshold must be finite, got {rule!r}")
        return Threshold(fixed, "fixed", requested, bimodality, "fixed by the user")
    if len(x) == 0:
        return Threshold(math.nan, "none", requested, None, "no feature has a CDS")
    median = float(np.median(x))
    otsu = otsu_threshold(x, bins)
    if requested == "median":
        return Threshold(median, "median", requested, bimodality, "asked for the median")
    if requested == "gmm":
        mixture = gmm_threshold(x)
        if math.isnan(mixture):
            return Threshold(median, "median", requested, bimodality, "constant scores")
        return Threshold(mixture, "gmm", requested, bimodality, "asked for a 2-Gaussian mixture")
    if requested == "otsu":
        if math.isnan(otsu):
            return Threshold(median, "median", requested, bimodality, "constant scores")
        return Threshold(otsu, "otsu", requested, bimodality, "asked for Otsu")
    if len(x) < MIN_FOR_OTSU:
        reason = f"only {len(x)} scores (< {MIN_FOR_OTSU}): median"
        return Threshold(median, "median", requested, bimodality, reason)
    if bimodality is not None and bimodality > BIMODALITY_CUTOFF and not math.isnan(otsu):
        reason = f"bimodal (Sarle's BC {bimodality:.3f} > 5/9): Otsu"
        return Threshold(otsu, "otsu", requested, bimodality, reason)
    shown = "undefined" if bimodality is None else f"{bimodality:.3f}"
    reason = f"not bimodal (Sarle's BC {shown} <= 5/9): median"
    return Threshold(median, "median", requested, bimodality, reason)


def scopes(cds: np.ndarray, threshold: float) -> list[str | None]:
    """'local' where CDS < threshold, 'global' where CDS ≥ threshold, None where CDS is nan."""
    if math.isnan(threshold):
        return [None] * len(cds)
    return [
        None if not math.isfinite(v) else ("local" if v < threshold else "global")
        for v in np.asarray(cds, dtype=np.float64)
    ]


def roc_auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Area under the ROC curve of `scores` for the `positive` labels (Mann–Whitney U, ties
    counted half). nan when either class is empty. Non-finite scores are left out."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(positive, dtype=bool)
    keep = np.isfinite(s)
    s, y = s[keep], y[keep]
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    # average rank of each distinct value: values below it, plus the middle of its tie group
    below = np.concatenate([[0], np.cumsum(counts)[:-1]])
    ranks = (below + (counts + 1) / 2)[inverse]
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
