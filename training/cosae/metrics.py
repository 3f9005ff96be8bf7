"""CoSAE's metrics, one definition for CoSAE and every baseline. Pure functions on arrays.

All are computed on held-out rows where both sides of every pair are known (the test split):
- **extraction**: FVU of each domain's reconstruction (`training.core.metrics`' FVU);
- **translation**: FVU and mean cosine of the translated rows against the true rows of the
  other domain, and R@1 of the translated rows as queries against that domain's gallery;
- **concept consistency**: overlap of the active concept sets of the two items of a pair
  (Jaccard, F1), and per-concept Pearson correlation across pairs (mean over live concepts);
- **cycle consistency**: FVU of x_i against its round trip i → j → i (and j → i → j);
- **shared-factor recovery** (synthetic pair): share of the known shared factors that one
  concept index tracks in both domains;
- **grouped retrieval** (the upgrade table): R@1 and mAP of each item as a query against the
  other items, relevant = the other items of its group (the other captions of its image).
"""

from __future__ import annotations

import numpy as np

from training.core.metrics import (
    fraction_of_variance_unexplained,
    prefix_cosine,
    recall_at,
    target_ranks,
    unit_rows,
)

RECOVERY_THRESHOLD = 0.7


def extraction_fvu(x: np.ndarray, reconstruction: np.ndarray) -> float:
    """FVU = Σ‖x − x̂‖² / Σ‖x − x̄‖² of one domain's reconstruction (0 perfect, 1 = the mean)."""
    return fraction_of_variance_unexplained(x, reconstruction)


def translation_fvu(target: np.ndarray, translated: np.ndarray) -> float:
    """FVU of D_j(E_i(x_i)) against the true x_j: Σ‖x_j − x̂_j‖² / Σ‖x_j − x̄_j‖²."""
    return fraction_of_variance_unexplained(target, translated)


def mean_cosine(target: np.ndarray, translated: np.ndarray) -> float:
    """Mean over pairs of cos(x_j,n, x̂_j,n) (0 for a zero row)."""
    a = np.asarray(target)
    return float(np.mean(prefix_cosine(a, translated, a.shape[1])))


def recall_at_1(queries: np.ndarray, gallery: np.ndarray, batch: int = 2048) -> float:
    """Share of rows n whose translated query q_n has the true x_j,n as its nearest gallery row.

    Cosine similarity; the gallery is every held-out row of the target domain, so chance is
    1/N. A tie with the true row counts as a miss unless the true row is first by index.
    """
    q = np.asarray(queries, dtype=np.float64)
    g = np.asarray(gallery, dtype=np.float64)
    if q.shape != g.shape:
        raise ValueError(f"queries {q.shape} and gallery {g.shape} must be row-aligned")
    own = np.arange(len(q))
    ranks = target_ranks(unit_rows(q, np.float64), unit_rows(g, np.float64), own, "by_row", batch)
    return recall_at(ranks, (1,))[1]


def grouped_retrieval(
    queries: np.ndarray, gallery: np.ndarray, groups: np.ndarray, batch: int = 1024
) -> dict[str, float]:
    """R@1 and mAP of query n against the gallery without its own row n; relevant = same group.

    Row n of `queries` and of `gallery` is item n (the query side may come from another model,
    or be translated). Cosine similarity; ties are broken by row index. For a query with
    relevant rows at ranks r_1 < … < r_R (1-based, its own row left out):
        R@1 = [r_1 = 1],    AP = (1/R) Σ_m m / r_m,
    averaged over the queries that have at least one relevant row (the others are skipped).
    """
    q = np.asarray(queries, dtype=np.float32)
    g = np.asarray(gallery, dtype=np.float32)
    labels = np.unique(np.asarray(groups), return_inverse=True)[1]
    if len(q) != len(g) or len(labels) != len(q):
        raise ValueError(f"queries {q.shape}, gallery {g.shape}, groups {labels.shape} differ")
    q, g = unit_rows(q, np.float32), unit_rows(g, np.float32)
    top1, precisions = [], []
    for start in range(0, len(q), batch):
        rows = np.arange(start, min(start + batch, len(q)))
        scores = q[rows] @ g.T
        scores[np.arange(len(rows)), rows] = -np.inf  # the query's own item is not a hit
        order = np.argsort(-scores, axis=1, kind="stable")[:, :-1]  # own row sorts last
        relevant = labels[order] == labels[rows][:, None]
        counts = relevant.sum(axis=1)
        keep = counts > 0
        hits = np.cumsum(relevant, axis=1)
        ranks = np.arange(1, relevant.shape[1] + 1)
        ap = (relevant * hits / ranks).sum(axis=1)[keep] / counts[keep]
        top1.append(relevant[keep, 0])
        precisions.append(ap)
    top = np.concatenate(top1)
    if not len(top):
        raise ValueError("no query has a relevant item: every group has a single row")
    return {"r1": float(top.mean()), "map": float(np.concatenate(precisions).mean())}


def active_set_overlap(codes_i: np.ndarray, codes_j: np.ndarray) -> dict[str, float]:
    """Mean over pairs of Jaccard |A∩B|/|A∪B| and F1 2|A∩B|/(|A|+|B|) of the active sets.

    A and B are the concepts with a non-zero code for the two items of a pair (their top-k
    sets). Pairs where both sets are empty are left out; NaN when all are.
    """
    a, b = np.asarray(codes_i) != 0, np.asarray(codes_j) != 0
    if a.shape != b.shape:
        raise ValueError(f"codes {a.shape} and {b.shape} must be row-aligned over one index")
    both = (a & b).sum(axis=1)
    either = (a | b).sum(axis=1)
    sizes = a.sum(axis=1) + b.sum(axis=1)
    keep = either > 0
    if not keep.any():
        return {"jaccard": float("nan"), "f1": float("nan")}
    return {
        "jaccard": float(np.mean(both[keep] / either[keep])),
        "f1": float(np.mean(2 * both[keep] / sizes[keep])),
    }


def concept_correlations(codes_i: np.ndarray, codes_j: np.ndarray) -> np.ndarray:
    """Pearson correlation [M] of each concept's activations across the pairs (i vs j).

    A concept constant on the pairs in either domain (e.g. never active there) gets 0.
    """
    a = np.asarray(codes_i, dtype=np.float64)
    b = np.asarray(codes_j, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"codes {a.shape} and {b.shape} must be row-aligned over one index")
    a, b = a - a.mean(axis=0), b - b.mean(axis=0)
    norms = np.linalg.norm(a, axis=0) * np.linalg.norm(b, axis=0)
    product = (a * b).sum(axis=0)
    return np.where(norms > 1e-12, product / np.maximum(norms, 1e-12), 0.0)


def concept_consistency(codes_i: np.ndarray, codes_j: np.ndarray) -> dict[str, float]:
    """Jaccard and F1 of active sets, and the mean per-concept correlation over live concepts.

    Live: active on at least one held-out item in either domain. `live` is their count.
    """
    live = (np.asarray(codes_i) != 0).any(axis=0) | (np.asarray(codes_j) != 0).any(axis=0)
    correlations = concept_correlations(codes_i, codes_j)
    return {
        **active_set_overlap(codes_i, codes_j),
        "correlation": float(correlations[live].mean()) if live.any() else float("nan"),
        "live": int(live.sum()),
    }


def cycle_fvu(x: np.ndarray, round_trip: np.ndarray) -> float:
    """FVU of x against its round trip through the other domain (0: the trip loses nothing)."""
    return fraction_of_variance_unexplained(x, round_trip)


def cross_correlations(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson correlation [A, B] of every column of a [N, A] with every column of b [N, B].

    0 where either column is constant (a dead concept, an absent factor).
    """
    c = np.asarray(a, dtype=np.float64)
    f = np.asarray(b, dtype=np.float64)
    if c.ndim != 2 or f.ndim != 2 or len(c) != len(f):
        raise ValueError(f"need row-aligned [N, ·] arrays, got {c.shape} and {f.shape}")
    c, f = c - c.mean(axis=0), f - f.mean(axis=0)
    norms = np.outer(np.linalg.norm(c, axis=0), np.linalg.norm(f, axis=0))
    return np.where(norms > 1e-12, (c.T @ f) / np.maximum(norms, 1e-12), 0.0)


def shared_factor_recovery(
    codes_i: np.ndarray,
    codes_j: np.ndarray,
    shared_factors: np.ndarray,
    threshold: float = RECOVERY_THRESHOLD,
) -> float:
    """Share of shared factors recovered by one concept in both domains.

    Factor s counts as recovered when some concept c has corr(f_i,c, s) > τ on domain i's rows
    AND corr(f_j,c, s) > τ on domain j's rows of the same items: the same concept index in both
    (τ = `threshold`, 0.7 by default). Two SAEs that each find s under different indices score 0
    for it.
    """
    both = np.minimum(
        cross_correlations(codes_i, shared_factors), cross_correlations(codes_j, shared_factors)
    )
    return float((both.max(axis=0) > threshold).mean())
