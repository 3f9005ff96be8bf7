"""The project's metric definitions, one implementation for every method
(docs/reference/metrics.md).

All inputs are rotated embeddings (rows), already passed through an artifact; s_ℓ(x, y) is the
cosine of the first ℓ coordinates. Pure functions on arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import numpy as np

from training.core.granularity import Contract, Granularity, previous_prefix

# The prefix each hard-negative type must be separated at
# (docs/reference/metrics.md#hard-negatives). The first four are the compositional corpus's types
# and keep their names: object = replace object, attribute = replace attribute, relation =
# replace relation, order = swap objects; the other three come from real captions
# (training.views.negatives.make_negatives). A type goes to the coarsest level whose view tells
# it from the caption:
#   object, add_object -> object: a different or an extra thing is there ("a dog and a cat run");
#     the object view ("a dog") already differs.
#   attribute, add_attribute -> attribute: the same things, one described otherwise ("a black
#     dog"); the object view is the same, the attribute view differs.
#   relation -> relation: the same described things doing something else.
#   order, swap_attribute -> caption: the same words in other places, so every view of a bag of
#     words matches; only the binding of the whole sentence ("the black dog chases the white
#     cat", not "the white dog ... the black cat") tells them apart.
NEGATIVE_LEVELS: dict[str, Granularity] = {
    "object": Granularity.OBJECT,
    "attribute": Granularity.ATTRIBUTE,
    "relation": Granularity.RELATION,
    "order": Granularity.CAPTION,
    "swap_attribute": Granularity.CAPTION,
    "add_object": Granularity.OBJECT,
    "add_attribute": Granularity.ATTRIBUTE,
}
CHANCE = 0.5  # HN "before the object prefix", where nothing can separate anything
Ties = Literal["against", "by_row"]


def unit_rows(x: np.ndarray, dtype: type[np.floating] = np.float32) -> np.ndarray:
    """x / ‖x‖ for every row, a C-contiguous copy in `dtype` (float16 input is widened first).

    The norm is floored at the dtype's smallest normal number, so a zero row stays zero rather
    than turning into NaN."""
    out = np.array(x, dtype=dtype, order="C")
    # np.linalg.norm(out, axis=1, keepdims=True)'s own arithmetic, without its dispatch (a
    # tenth of a served query's Python)
    norms = np.sqrt(np.add.reduce(out * out, axis=1, keepdims=True))
    out /= np.maximum(norms, np.finfo(dtype).tiny)
    return out


def prefix_vectors(
    rotated: np.ndarray, length: int, dtype: type[np.floating] = np.float32
) -> np.ndarray:
    """p_L(z) = z[:L] / ‖z[:L]‖ for every row, C-contiguous [N, L] (float32 unless `dtype` says
    otherwise); zero rows stay zero.

    The vector every prefix index stores and searches with: s_ℓ is ⟨p_L(q), p_L(x)⟩
    (docs/reference/metrics.md#prefix-similarity)."""
    z = np.asarray(rotated)
    if z.ndim != 2 or not 1 <= length <= z.shape[1]:
        raise ValueError(f"cannot take a prefix of length {length} of an array of shape {z.shape}")
    return unit_rows(z[:, :length], dtype)


def target_ranks(
    queries: np.ndarray,
    gallery: np.ndarray,
    targets: np.ndarray,
    ties: Ties = "against",
    batch: int | None = None,
) -> np.ndarray:
    """0-based rank of each query's target gallery row by inner product s = ⟨q, g⟩.

    rank = #{g : s_g > s_t} + #{g ≠ t : s_g = s_t} with ties="against" (a tie with another row
    counts as a miss), or + #{g < t : s_g = s_t} with ties="by_row" (the earlier row wins, as
    argmax). Scores are computed `batch` query rows at a time (all at once by default)."""
    q, g = np.asarray(queries), np.asarray(gallery)
    target = np.asarray(targets)
    step = len(q) if batch is None else batch
    ranks = np.empty(len(q), dtype=np.int64)
    for start in range(0, len(q), max(step, 1)):
        scores = q[start : start + step] @ g.T
        rows = np.arange(len(scores))
        right = scores[rows, target[start : start + step]]
        above = (scores > right[:, None]).sum(axis=1)
        tied = scores == right[:, None]
        if ties == "against":
            ranks[start : start + step] = above + tied.sum(axis=1) - 1
        else:
            before = np.arange(scores.shape[1])[None, :] < target[start : start + step, None]
            ranks[start : start + step] = above + (tied & before).sum(axis=1)
    return ranks


def recall_at(ranks: np.ndarray, ks: tuple[int, ...]) -> dict[int, float]:
    """R@k = share of queries whose target ranks among the first k (0-based rank < k)."""
    ranks = np.asarray(ranks)
    return {k: float((ranks < k).mean()) for k in ks}


def neighbour_recall(found: np.ndarray, exact: np.ndarray) -> float:
    """Recall of a search against the exact one: |found ∩ exact| / |exact|, averaged over
    queries (rows of both [Q, k]; a −1 in `found`, no hit, never counts)."""
    found, exact = np.asarray(found), np.asarray(exact)
    if found.shape[0] != exact.shape[0]:
        raise ValueError(f"found has {found.shape[0]} queries, exact {exact.shape[0]}")
    if exact.size == 0:
        return 1.0
    hits = sum(len(np.intersect1d(f[f >= 0], e)) for f, e in zip(found, exact, strict=True))
    return hits / exact.size


def prefix_cosine(a: np.ndarray, b: np.ndarray, length: int) -> np.ndarray:
    """s_ℓ(a_i, b_i) for every row i: cosine of the first `length` coordinates (0 for zero rows)."""
    x = np.asarray(a, dtype=np.float64)[:, :length]
    y = np.asarray(b, dtype=np.float64)[:, :length]
    norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    return np.einsum("ij,ij->i", x, y) / np.maximum(norms, 1e-12)


def present_rows(negative: np.ndarray) -> np.ndarray:
    """The rows that hold a negative: a row whose caption yields none of a type is NaN there."""
    return ~np.isnan(np.asarray(negative, dtype=np.float64)).any(axis=1)


def hard_negative_accuracy(
    anchor: np.ndarray, positive: np.ndarray, negative: np.ndarray, length: int
) -> float:
    """HN at one prefix: share of triples with s_ℓ(anchor, positive) > s_ℓ(anchor, negative),
    over the rows that hold a negative (NaN if none does)."""
    rows = present_rows(negative)
    if not rows.any():
        return float("nan")
    a, p, n = (np.asarray(x)[rows] for x in (anchor, positive, negative))
    return float((prefix_cosine(a, p, length) > prefix_cosine(a, n, length)).mean())


def hard_negative_table(
    anchor: np.ndarray,
    positive: np.ndarray,
    negatives: Mapping[str, np.ndarray],
    lengths: list[int],
) -> dict[str, dict[int, float]]:
    """HN(t, ℓ) for every negative type t that some row holds, and prefix length ℓ."""
    return {
        kind: {n: hard_negative_accuracy(anchor, positive, neg, n) for n in lengths}
        for kind, neg in negatives.items()
        if present_rows(neg).any()
    }


def _hn_at(table: Mapping[str, Mapping[int, float]], kind: str, length: int) -> float:
    return CHANCE if length == 0 else table[kind][length]


def selectivity(table: Mapping[str, Mapping[int, float]], contract: Contract) -> float:
    """Mean over the types present of HN(t, L(t)), each type at its assigned prefix."""
    kinds = [k for k in table if k in NEGATIVE_LEVELS]
    return float(np.mean([table[k][contract[NEGATIVE_LEVELS[k]]] for k in kinds]))


def staircase(table: Mapping[str, Mapping[int, float]], contract: Contract) -> float:
    """100 × mean over the types present of [HN(t, L(t)) − HN(t, the prefix before L(t))], 0.5
    before D/16."""
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


def _unbiased_hsic(k: np.ndarray, l: np.ndarray) -> float:  # noqa: E741
    """Unbiased HSIC estimator (Song et al. 2012) of two n×n kernel matrices, n > 3."""
    n = k.shape[0]
    kt, lt = k.copy(), l.copy()
    np.fill_diagonal(kt, 0.0)
    np.fill_diagonal(lt, 0.0)
    trace = float((kt * lt.T).sum())
    sums = float(kt.sum()) * float(lt.sum()) / ((n - 1) * (n - 2))
    cross = float(kt.sum(axis=0) @ lt.sum(axis=1)) * 2 / (n - 2)
    return (trace + sums - cross) / (n * (n - 3))


def _mutual_knn_mask(kernel: np.ndarray, k: int) -> np.ndarray:
    """1 where j is among the k nearest (largest-kernel) neighbours of i, i ≠ j."""
    scores = kernel.copy()
    np.fill_diagonal(scores, -np.inf)
    neighbours = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    mask = np.zeros_like(kernel)
    np.put_along_axis(mask, neighbours, 1.0, axis=1)
    return mask


def cknna(a: np.ndarray, b: np.ndarray, k: int = 10) -> float:
    """CKNNA (Huh et al. 2024): centred kernel alignment restricted to mutual k-NN pairs.

    With linear kernels K = AAᵀ, L = BBᵀ and α_ij = 1 when j is among the k nearest neighbours
    of i under both, CKNNA = HSIC(α∘K, α∘L) / sqrt(HSIC(α_K∘K, α_K∘K) · HSIC(α_L∘L, α_L∘L)),
    HSIC unbiased. 1 when the two representations share neighbourhoods and their geometry.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape[0] != b.shape[0] or a.shape[0] <= max(k, 3):
        raise ValueError(f"CKNNA needs two row-aligned sets of more than {max(k, 3)} rows")
    kernel_a, kernel_b = a @ a.T, b @ b.T
    mask_a, mask_b = _mutual_knn_mask(kernel_a, k), _mutual_knn_mask(kernel_b, k)
    joint = mask_a * mask_b
    self_a = _unbiased_hsic(mask_a * kernel_a, mask_a * kernel_a)
    self_b = _unbiased_hsic(mask_b * kernel_b, mask_b * kernel_b)
    denominator = np.sqrt(max(self_a * self_b, 0.0))
    return float(_unbiased_hsic(joint * kernel_a, joint * kernel_b) / (denominator + 1e-12))
