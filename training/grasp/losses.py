"""The five GraSP-VL loss terms. Pure functions on rotated embeddings (rows, torch tensors).

Notation: a, v_g, p, n_t are rotated anchors, views at granularity g, positives (the caption view)
and hard negatives of type t; L(g) is g's prefix length in the contract and L(t) the prefix a
negative type is assigned to; s_ℓ(x, y) is the cosine of the first ℓ coordinates; τ a
temperature and m a margin.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F  # noqa: N812

from training.core.granularity import Contract, Granularity
from training.core.metrics import NEGATIVE_LEVELS

VIEW_LEVELS = (Granularity.OBJECT, Granularity.ATTRIBUTE, Granularity.RELATION, Granularity.CAPTION)


def prefix_normalised(x: torch.Tensor, length: int) -> torch.Tensor:
    return F.normalize(x[:, :length], dim=1, eps=1e-8)


def prefix_similarity(x: torch.Tensor, y: torch.Tensor, length: int) -> torch.Tensor:
    """s_ℓ(x_i, y_i) row by row."""
    return (prefix_normalised(x, length) * prefix_normalised(y, length)).sum(dim=1)


def info_nce(
    anchors: torch.Tensor, views: torch.Tensor, length: int, temperature: float
) -> torch.Tensor:
    """InfoNCE at prefix ℓ: −mean_i log softmax_j(s_ℓ(a_i, v_j) / τ)[i], in-batch negatives."""
    logits = prefix_normalised(anchors, length) @ prefix_normalised(views, length).T / temperature
    return F.cross_entropy(logits, torch.arange(len(anchors), device=anchors.device))


def alignment_loss(
    anchors: torch.Tensor,
    views: Mapping[Granularity, torch.Tensor],
    contract: Contract,
    temperature: float,
    symmetric: bool = False,
) -> torch.Tensor:
    """Multi-granularity alignment: (1/|G|) Σ_g InfoNCE_{L(g)}(a, v_g).

    Each prefix is pulled to the view of its own granularity: D/16 to "a dog", D/8 to
    "a brown dog", D/4 to "a dog chasing a ball", D/2 to the caption. With `symmetric`, each
    term is ½[InfoNCE_{L(g)}(a, v_g) + InfoNCE_{L(g)}(v_g, a)]: the second direction picks, for
    each view, its anchor among the batch's anchors — what a routed search does (the query is
    a view, the gallery holds whole items), as in CLIP's symmetric loss.
    """
    terms = [info_nce(anchors, views[g], contract[g], temperature) for g in views]
    if symmetric:
        back = [info_nce(views[g], anchors, contract[g], temperature) for g in views]
        terms = [(a + b) / 2 for a, b in zip(terms, back, strict=True)]
    return torch.stack(terms).mean()


def retention_loss(
    anchors: torch.Tensor,
    views: Mapping[Granularity, torch.Tensor],
    contract: Contract,
    temperature: float,
) -> torch.Tensor:
    """Cumulative retention: mean over g and every longer prefix ℓ > L(g) of InfoNCE_ℓ(a, v_g).

    A longer prefix must still retrieve the coarser views (the caption prefix still knows it is
    a dog), so granularities nest instead of replacing each other.
    """
    lengths = sorted(set(contract.values()))
    terms = [
        info_nce(anchors, views[g], length, temperature)
        for g in views
        for length in lengths
        if length > contract[g]
    ]
    return torch.stack(terms).mean() if terms else anchors.new_zeros(())


def _negative_gaps(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    negatives: Mapping[str, torch.Tensor],
    contract: Contract,
    after: bool,
) -> list[torch.Tensor]:
    """s_ℓ(a, p) − s_ℓ(a, n_t) for each type t at prefixes ℓ ≥ L(t) (after) or ℓ < L(t), over
    the rows that hold a negative of type t (a row without one is NaN there)."""
    lengths = sorted(set(contract.values()))
    gaps = []
    for kind, negative in negatives.items():
        rows = ~torch.isnan(negative).any(dim=1)
        if not rows.any():
            continue
        a, p, n = anchors[rows], positives[rows], negative[rows]
        level = contract[NEGATIVE_LEVELS[kind]]
        for length in lengths:
            if (length >= level) == after:
                gaps.append(prefix_similarity(a, p, length) - prefix_similarity(a, n, length))
    return gaps


def selective_ranking_loss(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    negatives: Mapping[str, torch.Tensor],
    contract: Contract,
    margin: float,
) -> torch.Tensor:
    """Selective hard-negative ranking: mean over t, ℓ ≥ L(t) of relu(m − [s_ℓ(a,p) − s_ℓ(a,n_t)]).

    A negative of type t ("a white dog" for an attribute swap) must rank below the positive from
    its assigned prefix on, at every longer prefix too.
    """
    gaps = _negative_gaps(anchors, positives, negatives, contract, after=True)
    if not gaps:
        return anchors.new_zeros(())
    return torch.stack([F.relu(margin - g).mean() for g in gaps]).mean()


def invariance_loss(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    negatives: Mapping[str, torch.Tensor],
    contract: Contract,
) -> torch.Tensor:
    """Early-prefix invariance: mean over t and ℓ < L(t) of [s_ℓ(a,p) − s_ℓ(a,n_t)]².

    Before its assigned prefix a negative must *not* be separated: the object prefix should not
    care whether the dog is brown or white. Zero when no type has an earlier prefix.
    """
    gaps = _negative_gaps(anchors, positives, negatives, contract, after=False)
    return torch.stack([g.square().mean() for g in gaps]).mean() if gaps else anchors.new_zeros(())


def preservation_loss(
    rotation: torch.Tensor | None, before: torch.Tensor, after: torch.Tensor, pairs: torch.Tensor
) -> torch.Tensor:
    """Full-space preservation: ‖RᵀR − I‖²_F / D (when there is a matrix R) + mean over pairs
    (i, j) of [cos(after_i, after_j) − cos(before_i, before_j)]².

    Zero for an exact rotation (the Cayley map gives one); it is what keeps an adapter honest,
    and it guards the float32 rotation against numerical drift.
    """
    i, j = pairs[:, 0], pairs[:, 1]
    cos_before = F.cosine_similarity(before[i], before[j], dim=1)
    cos_after = F.cosine_similarity(after[i], after[j], dim=1)
    loss = (cos_after - cos_before).square().mean()
    if rotation is not None:
        eye = torch.eye(rotation.shape[0], dtype=rotation.dtype, device=rotation.device)
        loss = loss + (rotation.T @ rotation - eye).square().sum() / rotation.shape[0]
    return loss


def multi_positive_retrieval_loss(
    queries: torch.Tensor,
    rows: torch.Tensor,
    relevant: torch.Tensor,
    length: int,
    temperature: float,
) -> torch.Tensor:
    """Granularity retrieval at prefix ℓ: −mean_q log(Σ_{j relevant} e^{s_ℓ(q,x_j)/τ} /
    Σ_j e^{s_ℓ(q,x_j)/τ}) over the queries with a relevant row among `rows`.

    The benchmark's task as a loss: "a dog" must rank the rows of dog images first at D/16,
    with every other row of the batch as a negative (`relevant` is bool [queries, rows])."""
    logits = prefix_normalised(queries, length) @ prefix_normalised(rows, length).T / temperature
    has = relevant.any(dim=1)
    if not has.any():
        return logits.new_zeros(())
    positive = torch.logsumexp(logits.masked_fill(~relevant, float("-inf")), dim=1)
    return (torch.logsumexp(logits, dim=1) - positive)[has].mean()


def ranking_distillation_loss(
    queries: torch.Tensor, rows: torch.Tensor, length: int, temperature: float
) -> torch.Tensor:
    """Prefix ranking distillation: KL(softmax_j s_D(q,x_j)/τ ‖ softmax_j s_ℓ(q,x_j)/τ), mean
    over queries.

    Needs no labels: the prefix learns to rank the gallery's rows as the full vector ranks them,
    for query-like texts. The full-length side is the target (no gradient flows into it)."""
    with torch.no_grad():
        target = F.log_softmax(
            F.normalize(queries, dim=1) @ F.normalize(rows, dim=1).T / temperature, dim=1
        )
    logits = prefix_normalised(queries, length) @ prefix_normalised(rows, length).T / temperature
    return F.kl_div(F.log_softmax(logits, dim=1), target, log_target=True, reduction="batchmean")
