"""`strata train cedar`: learn U = exp(A − Aᵀ) so that every centred embedding is well described
by its k largest rotated coordinates.

U = exp(A − Aᵀ) U₀ with A learnt from zero and U₀ fixed: the identity, or (default) the
principal axes of the centred training rows, so training starts at PCA + top-k and only has
to improve on it (it converges in far fewer epochs than from the identity).

Loss: L1 reconstruction error mean_i ‖x_i − Uᵀ Π_k(U(x_i − b)) − b‖₁, b the training mean.
Anchoring (optional, `anchor_words` > 0; VASAE's soft anchoring): the first A rows of U₀ are
the orthonormalised centred text directions of the A most frequent caption words (the rest the
principal axes of the rows' complement), and the loss adds `anchor_weight`·mean_a ‖U_a − q_a‖²,
q_a the orthonormalised direction, so that axis a stays near its word instead of being tied to
it. Curriculum: k starts dense (k = D) and its range shrinks geometrically to [k_min, k_max] over
the first `curriculum_epochs`; each batch draws its k log-uniformly from the current range, so
the rotation serves every k of the range, not only one. Early stopping on the validation FVU at
the default k. Seeded and deterministic on the CPU; resumable from per-epoch checkpoints.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from pydantic import Field, model_validator

from training.cedar.sparse_codes import reconstruct, reconstruct_torch
from training.core.config import ConfigModel
from training.core.encoders import resolve_device
from training.core.errors import InputError
from training.core.metrics import fraction_of_variance_unexplained
from training.core.rotations import (
    ica_rotation,
    orthogonality_error,
    pca_rotation,
    reorthogonalise,
    skew_exponential,
)
from training.core.seeding import seeded
from training.loop import Checkpointing, Schedule, Selection, SkewParameterTrainer, run_loop
from training.sae.base import draw_k


class CedarConfig(ConfigModel):
    k: int = Field(32, ge=1, description="the default (target) number of active concepts")
    k_min: int = Field(4, ge=1, description="smallest k drawn per batch after the curriculum")
    k_max: int = Field(128, ge=1, description="largest k drawn per batch after the curriculum")
    curriculum_epochs: int = Field(3, ge=0, description="epochs from dense k to the range")
    epochs: int = Field(40, gt=0)
    batch_size: int = Field(1024, gt=1)
    learning_rate: float = Field(6e-3, gt=0)
    patience: int = Field(5, ge=1, description="epochs without validation gain before stopping")
    init: str = Field(
        "pca", pattern="^(pca|identity|ica)$", description="U₀: the rotation training starts from"
    )
    code_l1: float = Field(
        0.0, ge=0, description="weight of the L1 norm of the dense codes U(x − b), per row"
    )
    anchor_words: int = Field(
        0, ge=0, description="axes softly anchored to the most frequent words' text directions"
    )
    anchor_weight: float = Field(1.0, ge=0, description="weight of mean_a ‖U_a − q_a‖²")
    seed: int = 0

    @model_validator(mode="after")
    def _k_in_range(self) -> CedarConfig:
        if not self.k_min <= self.k <= self.k_max:
            raise ValueError(f"need k_min <= k <= k_max, got {self.k_min}, {self.k}, {self.k_max}")
        return self

    def fingerprint(self) -> str:
        """Identifies a run for resuming; `epochs` is left out, so a finished run can be
        continued for more epochs from its checkpoint."""
        return hashlib.sha256(self.model_dump_json(exclude={"epochs"}).encode()).hexdigest()[:16]


def k_bounds(progress: float, dim: int, k_min: int, k_max: int) -> tuple[int, int]:
    """The k range at `progress` ∈ [0, 1] through the curriculum: [D, D] at 0, then both ends
    move geometrically until they reach [k_min, k_max] at 1."""
    t = min(max(progress, 0.0), 1.0)
    low = round(dim ** (1 - t) * min(k_min, dim) ** t)
    high = round(dim ** (1 - t) * min(k_max, dim) ** t)
    return max(1, low), max(low, high)


def code_l1_norm(x: torch.Tensor, rotation: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    """mean over rows of ‖U(x − b)‖₁: small when every row lies on few axes."""
    return ((x - mean) @ rotation.T).abs().sum(dim=1).mean()


def anchored_start(anchors: np.ndarray, centred: np.ndarray) -> np.ndarray:
    """U₀ of an anchored run: the anchors (unit word directions [A, D]) orthonormalised in
    order, each signed to agree with its word, then the principal axes of the centred rows'
    part orthogonal to them."""
    q, r = np.linalg.qr(np.asarray(anchors, dtype=np.float64).T)
    q = (q * np.sign(np.where(np.diag(r) == 0, 1.0, np.diag(r)))).T  # ⟨q_a, t_a⟩ > 0
    rest = np.asarray(centred, dtype=np.float64)
    rest = rest - (rest @ q.T) @ q
    complement = pca_rotation(rest)[: rest.shape[1] - len(q)]
    return reorthogonalise(np.concatenate([q, complement]))


def l1_reconstruction_loss(
    x: torch.Tensor, rotation: torch.Tensor, mean: torch.Tensor, k: int
) -> torch.Tensor:
    """mean over rows of ‖x − (Uᵀ Π_k(U(x − b)) + b)‖₁."""
    return (x - reconstruct_torch(x, rotation, mean, k)).abs().sum(dim=1).mean()


@dataclass
class CedarResult:
    rotation: np.ndarray
    mean: np.ndarray
    epochs_run: int
    best_epoch: int
    seconds: float
    history: list[dict[str, float]]


class CedarTrainer(SkewParameterTrainer):
    """CEDAR's step, validation and checkpoint for `run_loop`: U = exp(A − Aᵀ)·U₀, A learnt."""

    label = "cedar"

    def __init__(
        self,
        train: np.ndarray,
        val: np.ndarray,
        config: CedarConfig,
        device: str,
        initial: np.ndarray | None = None,
        fixed_rows: int = 0,
        anchored: int = 0,
    ):
        self.val, self.config, self.dim = val, config, train.shape[1]
        self.mean = train.mean(axis=0)
        self.x = torch.as_tensor(train, device=device)
        self.b = torch.as_tensor(self.mean, device=device)
        self.base = initial if initial is not None else initial_rotation(train - self.mean, config)
        self.u0 = torch.as_tensor(self.base, dtype=torch.float32, device=device)
        self.anchors = self.u0[:anchored].clone()  # q_a: the anchored rows of U₀
        self.init_upper(self.dim, device, config.learning_rate)
        self.mask = None
        if fixed_rows:  # A's rows and columns of the fixed axes stay 0: exp(A) leaves them be
            rows, _ = torch.triu_indices(self.dim, self.dim, offset=1, device=device)
            self.mask = (rows >= fixed_rows).float()
        self.batches = max(1, len(train) // config.batch_size)
        self.curriculum_steps = max(1, config.curriculum_epochs * self.batches)

    def rotation(self) -> torch.Tensor:
        upper = self.upper if self.mask is None else self.upper * self.mask
        return skew_exponential(upper, self.dim) @ self.u0

    def begin_round(self, index: int) -> None:
        self.generator = torch.Generator().manual_seed(self.config.seed + index)
        self.order = torch.randperm(len(self.x), generator=self.generator)

    def step(self, step: int) -> dict[str, float]:
        config = self.config
        progress = 1.0 if config.curriculum_epochs == 0 else step / self.curriculum_steps
        k = draw_k(*k_bounds(progress, self.dim, config.k_min, config.k_max), self.generator)
        within = step % self.batches
        rows = self.order[within * config.batch_size : (within + 1) * config.batch_size]
        x, rotation = self.x[rows.to(self.x.device)], self.rotation()
        loss = l1_reconstruction_loss(x, rotation, self.b, k)
        record = {"l1": loss.item()}
        if config.code_l1 > 0:
            codes = code_l1_norm(x, rotation, self.b)
            loss = loss + config.code_l1 * codes
            record["code_l1"] = codes.item()
        if len(self.anchors):
            pull = ((rotation[: len(self.anchors)] - self.anchors) ** 2).sum(dim=1).mean()
            loss = loss + config.anchor_weight * pull
            record["anchor"] = pull.item()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return record

    def end_round(self, index: int, step: int, means: dict[str, float]) -> dict[str, float]:
        with torch.no_grad():
            rotation = self.rotation().cpu().numpy()
        k = self.config.k
        fvu = fraction_of_variance_unexplained(
            self.val, reconstruct(self.val, rotation, self.mean, k)
        )
        codes = {key: means[key] for key in ("code_l1", "anchor") if key in means}
        return {"epoch": index + 1, "l1": means["l1"], **codes, f"val_fvu_k{k}": fvu}


def initial_rotation(centred: np.ndarray, config: CedarConfig) -> np.ndarray:
    """U₀ of `config.init`: the identity, the principal axes, or FastICA's axes made
    orthonormal (`ica_rotation`)."""
    if config.init == "identity":
        return np.eye(centred.shape[1])
    if config.init == "ica":
        return ica_rotation(centred, seed=config.seed)
    return pca_rotation(centred)


def train_cedar(
    train: np.ndarray,
    val: np.ndarray,
    config: CedarConfig,
    work_dir: Path | None = None,
    device: str = "auto",
    progress: bool = True,
    initial: np.ndarray | None = None,
    fixed_rows: int = 0,
    anchors: np.ndarray | None = None,
) -> CedarResult:
    """Learn U on `train` rows (float [N, D]); stop early on the validation FVU at `config.k`.
    `initial` (an orthogonal [D, D]) replaces the U₀ of `config.init`; the first `fixed_rows`
    rows of U₀ are kept as they are (only the rotation of their complement is learnt).
    `anchors` (unit word directions [A, D], A < D) anchor the first A axes (module doc)."""
    train, val = _checked(train, "training"), _checked(val, "validation")
    dim = train.shape[1]
    if val.shape[1] != dim:
        raise ValueError(f"validation rows have dim {val.shape[1]}, training rows {dim}")
    if config.k_max > dim:
        raise InputError(
            f"k_max {config.k_max} exceeds the embeddings' dimension {dim}: give a CedarConfig "
            "(--config) with a smaller k_max"
        )
    device = resolve_device(device)
    if initial is not None:
        initial = np.asarray(initial, dtype=np.float64)
        if initial.shape != (dim, dim) or orthogonality_error(initial) > 1e-4:
            raise ValueError(f"the initial rotation must be an orthogonal [{dim}, {dim}] matrix")
    if not 0 <= fixed_rows < dim:
        raise ValueError(f"fixed_rows must be in [0, {dim}), got {fixed_rows}")
    anchored = 0
    if anchors is not None and len(anchors):
        if initial is not None or anchors.shape[1] != dim or len(anchors) >= dim:
            raise ValueError(f"anchors must be [A < {dim}, {dim}] word directions, no initial")
        initial, anchored = anchored_start(anchors, train - train.mean(axis=0)), len(anchors)
    start = (b"" if initial is None else initial.tobytes()) + str(fixed_rows).encode()
    fingerprint = hashlib.sha256(train.tobytes() + val.tobytes() + start).hexdigest()
    checkpointing = (
        Checkpointing(work_dir, config.fingerprint(), fingerprint, device) if work_dir else None
    )
    with seeded(config.seed):  # U₀ (the ICA start) and the training
        trainer = CedarTrainer(train, val, config, device, initial, fixed_rows, anchored)
        result = run_loop(
            trainer,
            Schedule(config.epochs * trainer.batches, trainer.batches),
            Selection(f"val_fvu_k{config.k}", "min", config.patience, config.curriculum_epochs),
            checkpointing,
            progress,
        )
    with torch.no_grad():
        upper = result.best.double() * (1.0 if trainer.mask is None else trainer.mask.double())
        rotation = reorthogonalise(skew_exponential(upper, dim).cpu().numpy() @ trainer.base)
    return CedarResult(
        rotation=rotation,
        mean=trainer.mean.astype(np.float32),
        epochs_run=result.state.rounds,
        best_epoch=result.state.best_round,
        seconds=result.state.seconds,
        history=result.state.history,
    )


def _checked(rows: np.ndarray, what: str) -> np.ndarray:
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    if rows.ndim != 2 or len(rows) == 0:
        raise ValueError(f"{what} embeddings must be a non-empty [N, D] array, got {rows.shape}")
    if not np.isfinite(rows).all():
        raise ValueError(f"{what} embeddings hold NaN or Inf")
    return rows
