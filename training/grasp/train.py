"""`strata train grasp`: learn R = Cayley(A)·R₀ on a GraspSet on the shared loop (`training.loop`).

Seeded and deterministic on the CPU; resumable: a checkpoint is written atomically after every
epoch into the work folder, and a rerun with the same config and data continues from it.
Early stopping on the validation score (`validation_score`), which epoch 0 (R₀ itself)
competes in, so a run never returns worse than its start.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from training.core.artifacts import TransformArtifact, data_fingerprint
from training.core.encoders import resolve_device
from training.core.granularity import Contract, Granularity, default_contract, validate_contract
from training.core.metrics import hard_negative_table, selectivity, staircase
from training.core.rotations import cayley, centred_principal_axes, reorthogonalise
from training.core.seeding import seeded
from training.grasp.config import GraspConfig
from training.grasp.data import GraspSet
from training.grasp.gallery import RetrievalTask, gallery_retrieval
from training.grasp.objective import (
    GalleryFit,
    fit_tensors,
    gallery_terms,
    linear_map,
    loss_terms,
    weighted_total,
)
from training.loop import Checkpointing, Schedule, Selection, SkewParameterTrainer, run_loop


@dataclass
class TrainResult:
    artifact: TransformArtifact
    epochs_run: int
    best_epoch: int
    seconds: float
    history: list[dict[str, float]]


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


class GraspTrainer(SkewParameterTrainer):
    """GraSP-VL's step, validation and checkpoint for `run_loop`."""

    label = "grasp"

    def __init__(
        self,
        data: GraspSet,
        config: GraspConfig,
        contract: Contract,
        device: str,
        fit: GalleryFit | None,
    ) -> None:
        self.config, self.contract, self.fit = config, contract, fit
        self.train = data.of_split(config.train_split)
        self.val = data.of_split(config.validation_split)
        self.dim = data.anchors.shape[1]
        self.start = initial_rotation(config, self.dim, fit)
        self.start_tensor = torch.as_tensor(self.start, dtype=torch.float32, device=device)
        self.validation_task = fit.validation if fit is not None else None
        self.fit_tensors = fit_tensors(fit, device)
        self.init_upper(self.dim, device, config.learning_rate)
        self.tensors = self.train.tensors(device)
        self.device = device
        self.batches = max(1, len(self.train) // config.batch_size)

    def rotation(self) -> torch.Tensor:
        return cayley(self.upper, self.dim) @ self.start_tensor

    def record(self, epoch: int, rotation: np.ndarray) -> dict[str, float]:
        scores = validation_score(rotation, self.val, self.contract, self.validation_task)
        return {"epoch": epoch, **{f"val_{k}": v for k, v in scores.items()}}

    def begin_round(self, index: int) -> None:
        seed = self.config.seed
        generator = torch.Generator().manual_seed(seed + index)
        self.order = torch.randperm(len(self.train), generator=generator)
        self.sampler = torch.Generator().manual_seed(seed + 7919 * (index + 1))

    def step(self, step: int) -> dict[str, float]:
        config, within = self.config, step % self.batches
        rows = self.order[within * config.batch_size : (within + 1) * config.batch_size]
        rows = rows.to(self.device)
        rotation = self.rotation()
        batch = {k: v[rows] for k, v in self.tensors.items()}
        terms = loss_terms(linear_map(rotation), batch, self.contract, config, rotation)
        if self.fit is not None:
            terms |= gallery_terms(
                linear_map(rotation), self.fit_tensors, self.contract, config, self.sampler
            )
        total = weighted_total(terms, config)
        self.optimizer.zero_grad()
        total.backward()
        self.optimizer.step()
        return {k: v.item() for k, v in terms.items()}

    def end_round(self, index: int, step: int, means: dict[str, float]) -> dict[str, float]:
        with torch.no_grad():
            rotation = self.rotation().cpu().numpy()
        return {**self.record(index + 1, rotation), **{k: v for k, v in means.items() if v}}

    def initial_record(self) -> dict[str, float]:
        return self.record(0, self.start)


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
    dim = data.anchors.shape[1]
    contract = validate_contract(config.contract, dim) if config.contract else default_contract(dim)
    extra = [fit.gallery, *fit.query_bank.values()] if fit is not None else []
    if fit is not None and fit.task is not None:
        extra += [fit.task.rows, *fit.task.embedded.values()]
    fingerprint = data_fingerprint(
        data.anchors, *data.views.values(), *data.negatives.values(), *extra
    )
    with seeded(config.seed):
        trainer = GraspTrainer(data, config, contract, device, fit)
        result = run_loop(
            trainer,
            Schedule(config.epochs * trainer.batches, trainer.batches),
            Selection("val_score", "max", config.patience),
            Checkpointing(work_dir, config.fingerprint(), fingerprint, device),
            progress,
        )
    state = result.state
    with torch.no_grad():
        best = cayley(result.best.double(), dim) @ trainer.start_tensor.double()
        rotation = reorthogonalise(best.cpu().numpy())
    best_record = state.history[state.best_round - 1] if state.best_round else state.initial
    artifact = TransformArtifact(
        method="grasp-vl",
        rotation=rotation,
        mean=np.zeros(dim),
        contract=contract,
        encoder=encoder,
        config=config.model_dump(),
        data_fingerprint=fingerprint,
        metrics={"validation": best_record, "initial": state.initial},
    )
    return TrainResult(artifact, state.rounds, state.best_round, state.seconds, state.history)
