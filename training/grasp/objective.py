"""GraSP-VL's objective: the weighted terms of one batch (`loss_terms`) and, when fitting to a
gallery, the two gallery terms of one sampled batch (`gallery_terms`).

Every term is computed on the transformed rows (a rotation R, or a baseline adapter); a term
whose weight is 0 is not computed. The total is Σ_t w_t L_t (`weighted_total`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from training.core.granularity import Contract, Granularity
from training.grasp.config import GraspConfig
from training.grasp.gallery import RetrievalTask
from training.grasp.losses import (
    VIEW_LEVELS,
    alignment_loss,
    invariance_loss,
    multi_positive_retrieval_loss,
    preservation_loss,
    ranking_distillation_loss,
    retention_loss,
    selective_ranking_loss,
)


@dataclass
class GalleryFit:
    """What fitting to a gallery needs: the gallery's rows (unlabelled: only their geometry is
    used), the retrieval task mined from the training split (supervision) and from the
    validation split (model selection), and a bank of embedded query-like texts per
    granularity for the distillation term."""

    gallery: np.ndarray
    task: RetrievalTask | None = None
    validation: RetrievalTask | None = None
    query_bank: dict[Granularity, np.ndarray] = field(default_factory=dict)


def linear_map(matrix: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """Rows x -> M x (that is, x @ Mᵀ)."""
    return lambda x: x @ matrix.T


def loss_terms(
    transform: Callable[[torch.Tensor], torch.Tensor],
    batch: dict[str, torch.Tensor],
    contract: Contract,
    config: GraspConfig,
    matrix: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Every weighted term on one batch (terms with weight 0 are not computed).

    `transform` maps embeddings to the trained space (a rotation, or a baseline adapter);
    `matrix` is the rotation itself when there is one, for the orthogonality penalty.
    """
    anchors = transform(batch["anchors"])
    views = {g: transform(batch[f"view_{g.value}"]) for g in VIEW_LEVELS}
    positives = views[Granularity.CAPTION]
    negatives = {
        k[4:]: transform_present_rows(transform, v)
        for k, v in batch.items()
        if k.startswith("neg_")
    }
    w = config.weights
    terms: dict[str, torch.Tensor] = {}
    if w.alignment:
        terms["alignment"] = alignment_loss(
            anchors, views, contract, config.temperature, config.symmetric_alignment
        )
    if w.retention:
        terms["retention"] = retention_loss(anchors, views, contract, config.temperature)
    if w.ranking:
        terms["ranking"] = selective_ranking_loss(
            anchors, positives, negatives, contract, config.margin
        )
    if w.invariance:
        terms["invariance"] = invariance_loss(anchors, positives, negatives, contract)
    if w.preservation:
        n = len(anchors)
        pairs = torch.stack([torch.arange(n), torch.roll(torch.arange(n), 1)], dim=1)
        terms["preservation"] = preservation_loss(matrix, batch["anchors"], anchors, pairs)
    return terms


def transform_present_rows(
    transform: Callable[[torch.Tensor], torch.Tensor], negative: torch.Tensor
) -> torch.Tensor:
    """`transform` of the rows that hold a negative; the NaN rows of captions without one stay
    NaN without passing through the transform (a NaN input would make its gradient NaN)."""
    present = ~torch.isnan(negative).any(dim=1, keepdim=True)
    out = transform(torch.where(present, negative, torch.zeros_like(negative)))
    return torch.where(present, out, torch.full_like(out, float("nan")))


def gallery_terms(
    transform: Callable[[torch.Tensor], torch.Tensor],
    fit: dict[str, Any],
    contract: Contract,
    config: GraspConfig,
    generator: torch.Generator,
) -> dict[str, torch.Tensor]:
    """The two gallery-fitting terms on one sampled batch (weight 0: not computed).

    retrieval     multi-positive retrieval of the training task's rows by its mined queries at
                  each granularity's prefix, plus half the mean over every longer prefix
                  (retention, as for the views)
    distillation  prefix ranking distillation of the gallery's rows for the query bank's texts
                  at each granularity's prefix

    `fit` holds GalleryFit's arrays as tensors (see `fit_tensors`)."""
    w = config.weights
    lengths = sorted(set(contract.values()))
    tau = config.retrieval_temperature

    def sample(n: int, size: int) -> torch.Tensor:
        return torch.randint(n, (size,), generator=generator).to(fit["device"])

    terms: dict[str, torch.Tensor] = {}
    if w.retrieval and fit["task"]:
        task_rows = fit["task_rows"]
        picked = sample(len(task_rows), config.rows_per_step)
        rows = transform(task_rows[picked])
        losses = []
        for granularity, (queries, relevant) in fit["task"].items():
            chosen = sample(len(queries), config.queries_per_step)
            rotated = transform(queries[chosen])
            mask = relevant[chosen][:, picked]
            level = contract[granularity]
            own = multi_positive_retrieval_loss(rotated, rows, mask, level, tau)
            longer = [
                multi_positive_retrieval_loss(rotated, rows, mask, n, tau)
                for n in lengths
                if n > level
            ]
            losses.append(own + 0.5 * torch.stack(longer).mean() if longer else own)
        terms["retrieval"] = torch.stack(losses).mean()
    if w.distillation and fit["bank"]:
        gallery = fit["gallery"]
        rows = transform(gallery[sample(len(gallery), config.rows_per_step)])
        terms["distillation"] = torch.stack(
            [
                ranking_distillation_loss(
                    transform(bank[sample(len(bank), config.queries_per_step)]),
                    rows,
                    contract[granularity],
                    tau,
                )
                for granularity, bank in fit["bank"].items()
            ]
        ).mean()
    return terms


def fit_tensors(fit: GalleryFit | None, device: str) -> dict[str, Any]:
    def tensor(x: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.as_tensor(np.asarray(x), dtype=dtype, device=device)

    if fit is None:
        return {"device": device, "task": {}, "bank": {}}
    task = fit.task
    return {
        "device": device,
        "gallery": tensor(fit.gallery),
        "task_rows": tensor(task.rows) if task else None,
        "task": {
            g: (tensor(task.embedded[g]), tensor(q.relevant, torch.bool))
            for g, q in (task.queries.items() if task else [])
            if len(q)
        },
        "bank": {g: tensor(b) for g, b in fit.query_bank.items() if len(b)},
    }


def weighted_total(terms: dict[str, torch.Tensor], config: GraspConfig) -> torch.Tensor:
    """Σ_t w_t L_t over the computed terms."""
    return sum(getattr(config.weights, k) * v for k, v in terms.items())
