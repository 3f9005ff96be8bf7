"""`strata train grasp`: learn R = Cayley(A) on a GraspSet, with early stopping and checkpoints.

Seeded and deterministic on the CPU; resumable: a checkpoint is written atomically after every
epoch into the work folder, and a rerun with the same config and data continues from it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, Field
from tqdm import tqdm

from training.checkpoints import load_checkpoint, save_checkpoint
from training.core.artifacts import TransformArtifact, data_fingerprint
from training.core.encoders import resolve_device
from training.core.granularity import Contract, Granularity, default_contract, validate_contract
from training.core.metrics import hard_negative_table, selectivity, staircase
from training.core.rotations import cayley, centred_principal_axes, reorthogonalise
from training.grasp.data import GraspSet
from training.grasp.gallery import RetrievalTask, gallery_retrieval
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

log = logging.getLogger(__name__)
TERMS = ("alignment", "retention", "ranking", "invariance", "preservation")
GALLERY_TERMS = ("retrieval", "distillation")


class LossWeights(BaseModel):
    """Weight of each term; 0 switches a term off (for ablations)."""

    alignment: float = Field(1.0, ge=0)
    retention: float = Field(0.5, ge=0)
    ranking: float = Field(3.0, ge=0)
    # large: the squared prefix-cosine gaps it penalises are small numbers (~1e-3)
    invariance: float = Field(3000.0, ge=0)
    preservation: float = Field(1.0, ge=0)
    # gallery fitting (train_grasp with a GalleryFit; ignored without one)
    retrieval: float = Field(1.0, ge=0)
    distillation: float = Field(1.0, ge=0)


class GraspConfig(BaseModel):
    epochs: int = Field(30, gt=0)
    batch_size: int = Field(256, gt=1)
    learning_rate: float = Field(1e-2, gt=0)
    temperature: float = Field(0.05, gt=0)
    margin: float = Field(0.1, ge=0)
    patience: int = Field(5, ge=1, description="epochs without validation gain before stopping")
    seed: int = 0
    train_split: str = "train"
    validation_split: str = "val"
    weights: LossWeights = LossWeights()
    # alignment in both directions (anchor -> view and view -> anchor); see alignment_loss
    symmetric_alignment: bool = False
    contract: dict[str, int] | None = None
    # gallery fitting: where R starts (R = Cayley(A)·R₀) and the batches of the two terms
    init: Literal["identity", "gallery-pca"] = "gallery-pca"
    # of both gallery terms; 0.05 against 0.1 on Flickr8k dev (the gallery ablation's validation)
    retrieval_temperature: float = Field(0.05, gt=0)
    queries_per_step: int = Field(128, gt=0)
    rows_per_step: int = Field(2048, gt=1)
    distillation_queries: list[Literal["vocabulary", "training"]] = ["vocabulary", "training"]

    def fingerprint(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


# What `strata train grasp --gallery` and the demo train with when no config is given (chosen on
# Flickr8k dev, README "Fitting the gallery"): no view alignment or retention (they pull the
# object prefix towards the views and cost gallery retrieval), gentler steps, and the ranking
# term at 15 (dev selectivity 0.844 against 0.827 at 3, the same dev retrieval AP).
GALLERY_RECIPE = GraspConfig(
    learning_rate=3e-3,
    epochs=20,
    patience=4,
    weights=LossWeights(alignment=0, retention=0, ranking=15),
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


@dataclass
class TrainResult:
    artifact: TransformArtifact
    epochs_run: int
    best_epoch: int
    seconds: float
    history: list[dict[str, float]]


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

    `fit` holds GalleryFit's arrays as tensors (see `_fit_tensors`)."""
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


def _fit_tensors(fit: GalleryFit | None, device: str) -> dict[str, Any]:
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


def validation_score(
    rotation: np.ndarray,
    data: GraspSet,
    contract: Contract,
    retrieval: RetrievalTask | None = None,
) -> dict[str, float]:
    """Selectivity and staircase on the validation split, and with a validation retrieval task
    the mean AP@100 of its queries at their own prefixes. Early stopping follows
    selectivity + staircase / 100 (selectivity alone saturates on easy negatives); with a
    retrieval task, that AP + (selectivity + staircase / 100) / 10: retrieval leads."""
    rotate = lambda x: x @ rotation.T  # noqa: E731
    table = hard_negative_table(
        rotate(data.anchors),
        rotate(data.views[Granularity.CAPTION]),
        {k: rotate(n) for k, n in data.negatives.items()},
        sorted(set(contract.values())),
    )
    chosen, steps = selectivity(table, contract), staircase(table, contract)
    scores = {"selectivity": chosen, "staircase": steps, "score": chosen + steps / 100}
    if retrieval is not None and retrieval.pairs():
        report = gallery_retrieval(rotate, retrieval.pairs(), retrieval.rows, contract)
        ap = float(np.mean([r["own"]["AP@100"] for r in report.values()]))
        scores.update(
            {f"ap_{g}": r["own"]["AP@100"] for g, r in report.items()},
            retrieval_ap=ap,
            score=ap + scores["score"] / 10,
        )
    return scores


def initial_rotation(config: GraspConfig, dim: int, fit: GalleryFit | None) -> np.ndarray:
    """R₀: the identity, or with a gallery and `init` "gallery-pca" its centred principal axes."""
    if fit is not None and config.init == "gallery-pca":
        return centred_principal_axes(fit.gallery)
    return np.eye(dim)


def train_grasp(
    data: GraspSet,
    config: GraspConfig,
    work_dir: Path,
    encoder: str | None = None,
    device: str = "auto",
    progress: bool = True,
    fit: GalleryFit | None = None,
) -> TrainResult:
    """Train on `config.train_split`, stop early on `config.validation_split`.

    With `fit`, R = Cayley(A)·R₀ is fitted to the gallery it will index (GalleryFit): R₀ from
    the gallery, the retrieval and distillation terms beside the GraSP-VL terms, and model
    selection on the validation retrieval task. Epoch 0 (R₀ itself) is scored too, so a
    training run never returns worse than its start on the validation score."""
    device = resolve_device(device)
    train, val = data.of_split(config.train_split), data.of_split(config.validation_split)
    dim = data.anchors.shape[1]
    contract = validate_contract(config.contract, dim) if config.contract else default_contract(dim)
    extra = [fit.gallery, *fit.query_bank.values()] if fit is not None else []
    if fit is not None and fit.task is not None:
        extra += [fit.task.rows, *fit.task.embedded.values()]
    fingerprint = data_fingerprint(
        data.anchors, *data.views.values(), *data.negatives.values(), *extra
    )
    start = initial_rotation(config, dim, fit)
    start_tensor = torch.as_tensor(start, dtype=torch.float32, device=device)
    validation_task = fit.validation if fit is not None else None
    fit_tensors = _fit_tensors(fit, device)
    torch.manual_seed(config.seed)
    upper = torch.zeros(dim * (dim - 1) // 2, device=device, requires_grad=True)
    optimizer = torch.optim.Adam([upper], lr=config.learning_rate)
    initial = validation_score(start, val, contract, validation_task)
    state = {
        "epoch": 0,
        "best": initial["score"],
        "best_epoch": 0,
        "bad_epochs": 0,
        "history": [],
        "initial": {"epoch": 0, **{f"val_{k}": v for k, v in initial.items()}},
    }
    best_upper = upper.detach().clone()
    checkpoint = work_dir / "checkpoint.pt"
    saved = load_checkpoint(checkpoint, config.fingerprint(), fingerprint, device)
    if saved is not None:
        with torch.no_grad():
            upper.copy_(saved["upper"])
        optimizer.load_state_dict(saved["optimizer"])
        best_upper, state = saved["best_upper"], saved["state"]
        log.info("resuming GraSP-VL training at epoch %d", state["epoch"])

    tensors = train.tensors(device)
    started = time.perf_counter()
    batches = max(1, len(train) // config.batch_size)
    terms_run = (*TERMS, *GALLERY_TERMS)
    while state["epoch"] < config.epochs and state["bad_epochs"] < config.patience:
        epoch = state["epoch"]
        order = torch.randperm(
            len(train), generator=torch.Generator().manual_seed(config.seed + epoch)
        )
        sampler = torch.Generator().manual_seed(config.seed + 7919 * (epoch + 1))
        sums = dict.fromkeys(terms_run, 0.0)
        bar = tqdm(
            range(batches), desc=f"grasp epoch {epoch + 1}", disable=not progress, leave=False
        )
        for step in bar:
            rows = order[step * config.batch_size : (step + 1) * config.batch_size].to(device)
            rotation = cayley(upper, dim) @ start_tensor
            batch = {k: v[rows] for k, v in tensors.items()}
            terms = loss_terms(linear_map(rotation), batch, contract, config, rotation)
            if fit is not None:
                terms |= gallery_terms(linear_map(rotation), fit_tensors, contract, config, sampler)
            total = sum(getattr(config.weights, k) * v for k, v in terms.items())
            optimizer.zero_grad()
            total.backward()
            optimizer.step()
            for k, v in terms.items():
                sums[k] += v.item()
            bar.set_postfix({k[:5]: f"{v / (step + 1):.3f}" for k, v in sums.items() if v})
        with torch.no_grad():
            rotation = (cayley(upper, dim) @ start_tensor).cpu().numpy()
        scores = validation_score(rotation, val, contract, validation_task)
        score = scores["score"]
        record = {
            "epoch": epoch + 1,
            **{f"val_{k}": v for k, v in scores.items()},
            **{k: v / batches for k, v in sums.items() if v},
        }
        state["history"].append(record)
        log.info("epoch %d: %s", epoch + 1, json.dumps({k: round(v, 4) for k, v in record.items()}))
        if score > state["best"]:
            state.update(best=score, best_epoch=epoch + 1, bad_epochs=0)
            best_upper = upper.detach().clone()
        else:
            state["bad_epochs"] += 1
        state["epoch"] = epoch + 1
        save_checkpoint(
            checkpoint,
            config.fingerprint(),
            fingerprint,
            {
                "upper": upper.detach(),
                "optimizer": optimizer.state_dict(),
                "best_upper": best_upper,
                "state": state,
            },
        )

    with torch.no_grad():
        rotation = reorthogonalise(
            (cayley(best_upper.double(), dim) @ start_tensor.double()).cpu().numpy()
        )
    best_record = (
        state["history"][state["best_epoch"] - 1] if state["best_epoch"] else state["initial"]
    )
    artifact = TransformArtifact(
        method="grasp-vl",
        rotation=rotation,
        mean=np.zeros(dim),
        contract=contract,
        encoder=encoder,
        config=config.model_dump(),
        data_fingerprint=fingerprint,
        metrics={"validation": best_record, "initial": state["initial"]},
    )
    return TrainResult(
        artifact,
        state["epoch"],
        state["best_epoch"],
        time.perf_counter() - started,
        state["history"],
    )
