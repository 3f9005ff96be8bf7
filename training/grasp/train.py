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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from pydantic import BaseModel, Field
from tqdm import tqdm

from training.artifacts import TransformArtifact, data_fingerprint
from training.checkpoints import load_checkpoint, save_checkpoint
from training.embedding.encoders import resolve_device
from training.granularity import Contract, Granularity, default_contract, validate_contract
from training.grasp.data import GraspSet
from training.grasp.losses import (
    VIEW_LEVELS,
    alignment_loss,
    invariance_loss,
    preservation_loss,
    retention_loss,
    selective_ranking_loss,
)
from training.metrics import hard_negative_table, selectivity, staircase
from training.rotations import cayley, reorthogonalise

log = logging.getLogger(__name__)
TERMS = ("alignment", "retention", "ranking", "invariance", "preservation")


class LossWeights(BaseModel):
    """Weight of each term; 0 switches a term off (for ablations)."""

    alignment: float = Field(1.0, ge=0)
    retention: float = Field(0.5, ge=0)
    ranking: float = Field(3.0, ge=0)
    # large: the squared prefix-cosine gaps it penalises are small numbers (~1e-3)
    invariance: float = Field(3000.0, ge=0)
    preservation: float = Field(1.0, ge=0)


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

    def fingerprint(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


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


def validation_score(rotation: np.ndarray, data: GraspSet, contract: Contract) -> dict[str, float]:
    """Selectivity and staircase on the validation split; early stopping follows
    selectivity + staircase / 100, since selectivity alone saturates on easy negatives."""
    rotate = lambda x: x @ rotation.T  # noqa: E731
    table = hard_negative_table(
        rotate(data.anchors),
        rotate(data.views[Granularity.CAPTION]),
        {k: rotate(n) for k, n in data.negatives.items()},
        sorted(set(contract.values())),
    )
    chosen, steps = selectivity(table, contract), staircase(table, contract)
    return {"selectivity": chosen, "staircase": steps, "score": chosen + steps / 100}


def train_grasp(
    data: GraspSet,
    config: GraspConfig,
    work_dir: Path,
    encoder: str | None = None,
    device: str = "auto",
    progress: bool = True,
) -> TrainResult:
    """Train on `config.train_split`, stop early on `config.validation_split` selectivity."""
    device = resolve_device(device)
    train, val = data.of_split(config.train_split), data.of_split(config.validation_split)
    dim = data.anchors.shape[1]
    contract = validate_contract(config.contract, dim) if config.contract else default_contract(dim)
    fingerprint = data_fingerprint(data.anchors, *data.views.values(), *data.negatives.values())
    torch.manual_seed(config.seed)
    upper = torch.zeros(dim * (dim - 1) // 2, device=device, requires_grad=True)
    optimizer = torch.optim.Adam([upper], lr=config.learning_rate)
    state = {"epoch": 0, "best": -1.0, "best_epoch": 0, "bad_epochs": 0, "history": []}
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
    while state["epoch"] < config.epochs and state["bad_epochs"] < config.patience:
        epoch = state["epoch"]
        order = torch.randperm(
            len(train), generator=torch.Generator().manual_seed(config.seed + epoch)
        )
        sums = dict.fromkeys(TERMS, 0.0)
        bar = tqdm(
            range(batches), desc=f"grasp epoch {epoch + 1}", disable=not progress, leave=False
        )
        for step in bar:
            rows = order[step * config.batch_size : (step + 1) * config.batch_size].to(device)
            rotation = cayley(upper, dim)
            batch = {k: v[rows] for k, v in tensors.items()}
            terms = loss_terms(linear_map(rotation), batch, contract, config, rotation)
            total = sum(getattr(config.weights, k) * v for k, v in terms.items())
            optimizer.zero_grad()
            total.backward()
            optimizer.step()
            for k, v in terms.items():
                sums[k] += v.item()
            bar.set_postfix({k[:5]: f"{v / (step + 1):.3f}" for k, v in sums.items() if v})
        with torch.no_grad():
            rotation = cayley(upper, dim).cpu().numpy()
        scores = validation_score(rotation, val, contract)
        score = scores["score"]
        record = {
            "epoch": epoch + 1,
            **{f"val_{k}": v for k, v in scores.items()},
            **{k: v / batches for k, v in sums.items()},
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
        rotation = reorthogonalise(cayley(best_upper.double(), dim).cpu().numpy())
    artifact = TransformArtifact(
        method="grasp-vl",
        rotation=rotation,
        mean=np.zeros(dim),
        contract=contract,
        encoder=encoder,
        config=config.model_dump(),
        data_fingerprint=fingerprint,
        metrics={"validation": state["history"][state["best_epoch"] - 1]},
    )
    return TrainResult(
        artifact,
        state["epoch"],
        state["best_epoch"],
        time.perf_counter() - started,
        state["history"],
    )
