"""`strata train cedar`: learn U = exp(A − Aᵀ) so that every centred embedding is well described
by its k largest rotated coordinates.

U = exp(A − Aᵀ) U₀ with A learnt from zero and U₀ fixed: the identity, or (default) the
principal axes of the centred training rows, so training starts at PCA + top-k and only has
to improve on it (it converges in far fewer epochs than from the identity).

Loss: L1 reconstruction error mean_i ‖x_i − Uᵀ Π_k(U(x_i − b)) − b‖₁, b the training mean.
Curriculum: k starts dense (k = D) and its range shrinks geometrically to [k_min, k_max] over
the first `curriculum_epochs`; each batch draws its k log-uniformly from the current range, so
the rotation serves every k of the range, not only one. Early stopping on the validation FVU at
the default k. Seeded and deterministic on the CPU; resumable from per-epoch checkpoints.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from pydantic import BaseModel, Field, model_validator
from tqdm import tqdm

from training.cedar.sparse_codes import reconstruct, reconstruct_torch
from training.checkpoints import load_checkpoint, save_checkpoint
from training.core.encoders import resolve_device
from training.core.metrics import fraction_of_variance_unexplained
from training.core.rotations import pca_rotation, reorthogonalise, skew_exponential

log = logging.getLogger(__name__)


class CedarConfig(BaseModel):
    k: int = Field(32, ge=1, description="the default (target) number of active concepts")
    k_min: int = Field(4, ge=1, description="smallest k drawn per batch after the curriculum")
    k_max: int = Field(128, ge=1, description="largest k drawn per batch after the curriculum")
    curriculum_epochs: int = Field(3, ge=0, description="epochs from dense k to the range")
    epochs: int = Field(40, gt=0)
    batch_size: int = Field(1024, gt=1)
    learning_rate: float = Field(6e-3, gt=0)
    patience: int = Field(5, ge=1, description="epochs without validation gain before stopping")
    init: str = Field(
        "pca", pattern="^(pca|identity)$", description="U₀: the rotation training starts from"
    )
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


def draw_k(low: int, high: int, generator: torch.Generator) -> int:
    """k log-uniform in [low, high] (integers), so small k is drawn as often as large."""
    u = torch.rand((), generator=generator).item()
    return int(min(high, max(low, round(math.exp(math.log(low) + u * math.log(high / low))))))


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


def train_cedar(
    train: np.ndarray,
    val: np.ndarray,
    config: CedarConfig,
    work_dir: Path | None = None,
    device: str = "auto",
    progress: bool = True,
) -> CedarResult:
    """Learn U on `train` rows (float [N, D]); stop early on the validation FVU at `config.k`."""
    train, val = _checked(train, "training"), _checked(val, "validation")
    dim = train.shape[1]
    if val.shape[1] != dim:
        raise ValueError(f"validation rows have dim {val.shape[1]}, training rows {dim}")
    if config.k_max > dim:
        raise ValueError(f"k_max {config.k_max} exceeds the dimension {dim}")
    device = resolve_device(device)
    torch.manual_seed(config.seed)
    mean = train.mean(axis=0)
    x = torch.as_tensor(train, device=device)
    b = torch.as_tensor(mean, device=device)
    base = np.eye(dim) if config.init == "identity" else pca_rotation(train - mean)
    u0 = torch.as_tensor(base, dtype=torch.float32, device=device)
    upper = torch.zeros(dim * (dim - 1) // 2, device=device, requires_grad=True)
    optimizer = torch.optim.Adam([upper], lr=config.learning_rate)
    state = {
        "epoch": 0, "best": math.inf, "best_epoch": 0, "bad_epochs": 0, "history": [],
        "seconds": 0.0,  # training time over every run that led here (resumes add up)
    }  # fmt: skip
    best_upper = upper.detach().clone()
    fingerprint = hashlib.sha256(train.tobytes() + val.tobytes()).hexdigest()
    checkpoint = work_dir / "checkpoint.pt" if work_dir else None
    saved = checkpoint and load_checkpoint(checkpoint, config.fingerprint(), fingerprint, device)
    if saved:
        with torch.no_grad():
            upper.copy_(saved["upper"])
        optimizer.load_state_dict(saved["optimizer"])
        best_upper, state = saved["best_upper"], saved["state"]
        log.info("resuming CEDAR training at epoch %d", state["epoch"])

    batches = max(1, len(train) // config.batch_size)
    total_curriculum = max(1, config.curriculum_epochs * batches)
    started = time.perf_counter()
    while state["epoch"] < config.epochs and state["bad_epochs"] < config.patience:
        epoch = state["epoch"]
        generator = torch.Generator().manual_seed(config.seed + epoch)
        order = torch.randperm(len(train), generator=generator)
        running = 0.0
        bar = tqdm(
            range(batches), desc=f"cedar epoch {epoch + 1}", disable=not progress, leave=False
        )
        for step in bar:
            progress_t = (epoch * batches + step) / total_curriculum
            if config.curriculum_epochs == 0:
                progress_t = 1.0
            k = draw_k(*k_bounds(progress_t, dim, config.k_min, config.k_max), generator)
            rows = order[step * config.batch_size : (step + 1) * config.batch_size].to(device)
            loss = l1_reconstruction_loss(x[rows], skew_exponential(upper, dim) @ u0, b, k)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.item()
            bar.set_postfix(l1=f"{running / (step + 1):.4f}", k=k)
        with torch.no_grad():
            rotation = (skew_exponential(upper, dim) @ u0).cpu().numpy()
        fvu = fraction_of_variance_unexplained(val, reconstruct(val, rotation, mean, config.k))
        in_curriculum = epoch + 1 < config.curriculum_epochs
        record = {"epoch": epoch + 1, "l1": running / batches, f"val_fvu_k{config.k}": fvu}
        state["history"].append(record)
        log.info(
            "epoch %d: l1 %.4f, validation FVU@%d %.4f", epoch + 1, record["l1"], config.k, fvu
        )
        if in_curriculum or fvu < state["best"]:
            state.update(best=fvu, best_epoch=epoch + 1, bad_epochs=0)
            best_upper = upper.detach().clone()
        else:
            state["bad_epochs"] += 1
        state["epoch"] = epoch + 1
        state["seconds"] = state.get("seconds", 0.0) + time.perf_counter() - started
        started = time.perf_counter()
        if checkpoint:
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
        rotation = reorthogonalise(skew_exponential(best_upper.double(), dim).cpu().numpy() @ base)
    return CedarResult(
        rotation=rotation,
        mean=mean.astype(np.float32),
        epochs_run=state["epoch"],
        best_epoch=state["best_epoch"],
        seconds=state.get("seconds", 0.0),
        history=state["history"],
    )


def _checked(rows: np.ndarray, what: str) -> np.ndarray:
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    if rows.ndim != 2 or len(rows) == 0:
        raise ValueError(f"{what} embeddings must be a non-empty [N, D] array, got {rows.shape}")
    if not np.isfinite(rows).all():
        raise ValueError(f"{what} embeddings hold NaN or Inf")
    return rows
