"""Training one SAE baseline on the shared loop (`training.loop`), and its reconstruction.

Adam at `config.lr`; each epoch shuffles with a seeded torch.Generator, so a seed gives the
same weights on the same device. After every epoch the validation FVU at `config.k`
(per-sample top-k, `reconstruct`; the project's one FVU,
`training.core.metrics.fraction_of_variance_unexplained`) is measured; training stops after
`config.patience` epochs without improvement and the best epoch's weights are returned.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from training.core.metrics import fraction_of_variance_unexplained
from training.core.seeding import seeded
from training.loop import Schedule, Selection, run_loop
from training.sae.base import (
    PenaltyInputs,
    SparseAutoencoder,
    checked_k,
    checked_rows,
    constrained_step,
    draw_k,
    prepare_scale,
)
from training.sae.config import SaeConfig
from training.sae.registry import make_sae


class SaeTrainer:
    """The SAE's step, validation and best weights, for `run_loop` (no checkpoints)."""

    def __init__(
        self,
        model: SparseAutoencoder,
        x: torch.Tensor,
        val: np.ndarray,
        variance: float,
        config: SaeConfig,
    ) -> None:
        self.model, self.x, self.val, self.variance, self.config = model, x, val, variance, config
        self.label = f"{config.kind} sae"
        self.optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        self.batches = max(1, len(x) // config.batch_size)
        self.total_steps = config.epochs * self.batches
        self.last_fired = torch.zeros(model.n_latents, dtype=torch.long, device=x.device)
        self.seen = 0

    def begin_round(self, index: int) -> None:
        self.started = time.perf_counter()
        self.generator = torch.Generator().manual_seed(self.config.seed * 1_000_003 + index)
        self.order = torch.randperm(len(self.x), generator=self.generator).to(self.x.device)
        self.model.train()

    def step(self, step: int) -> dict[str, float]:
        model, size = self.model, self.config.batch_size
        within = step % self.batches
        rows = self.order[within * size : (within + 1) * size]
        x = self.x[rows]
        k = self.config.k  # or log-uniform in k_range, the schedule CEDAR's training draws from
        if self.config.k_range is not None:
            k = draw_k(*self.config.k_range, self.generator)
        codes, acts = model.training_codes(x, k)
        loss, recon = model.reconstruction_loss(x, codes, self.variance)
        dead = (self.seen - self.last_fired) >= len(self.x)
        loss = loss + model.penalty(
            PenaltyInputs(
                x, codes, acts, recon, self.variance, dead, step, self.total_steps, self.config.l1
            )
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        constrained_step(self.optimizer, [model])
        self.seen += len(rows)
        with torch.no_grad():
            fired = (codes > 0).any(dim=0)
            self.last_fired[fired] = self.seen
            l0 = float((codes > 0).sum(dim=1).float().mean())
        return {"loss": float(loss.detach()), "l0": l0}

    def end_round(self, index: int, step: int, means: dict[str, float]) -> dict[str, float]:
        val_fvu = fraction_of_variance_unexplained(
            self.val, reconstruct(self.model, self.val, self.config.k)
        )
        return {
            "epoch": index + 1,
            "train_loss": means["loss"],
            "val_fvu": val_fvu,
            "l0": means["l0"],
            "dead_fraction": float(((self.seen - self.last_fired) >= len(self.x)).float().mean()),
            "seconds": time.perf_counter() - self.started,
        }

    def initial_record(self) -> None:
        return None

    def snapshot(self) -> dict[str, torch.Tensor]:
        return {name: value.detach().clone() for name, value in self.model.state_dict().items()}

    def checkpoint_state(self) -> dict[str, Any]:
        raise NotImplementedError("SAE baselines are not checkpointed")

    def load_checkpoint_state(self, saved: dict[str, Any]) -> None:
        raise NotImplementedError("SAE baselines are not checkpointed")


def train_sae(
    train: np.ndarray, val: np.ndarray, config: SaeConfig, progress: bool = True
) -> tuple[SparseAutoencoder, list[dict]]:
    """Train one SAE on float rows [N, D]; return the best-validation model and the history.

    History rows: epoch, train_loss (mean over the epoch's batches, the kind's own loss),
    val_fvu, l0 (mean active latents per sample in training), dead_fraction, seconds (that
    epoch's wall time).
    """
    train_rows = checked_rows(train, "training")
    val_rows = checked_rows(val, "validation")
    if val_rows.shape[1] != train_rows.shape[1]:
        raise ValueError(
            f"validation rows have dim {val_rows.shape[1]}, training rows {train_rows.shape[1]}"
        )
    if len(val_rows) < 2:
        raise ValueError("validation needs at least 2 rows (FVU is undefined for one)")
    dim = train_rows.shape[1]
    n_latents = config.expansion * dim
    checked_k(config.largest_k(), n_latents)
    device = torch.device(config.device)

    with seeded(config.seed):
        model = make_sae(config.kind, dim, n_latents, k=config.k, seed=config.seed)
        x_all = torch.as_tensor(train_rows, device=device)
        variance, scale = prepare_scale(model, x_all)
        model.to(device)
        trainer = SaeTrainer(model, x_all, val_rows, variance * scale**2, config)
        selection = Selection("val_fvu", "min", config.patience)
        schedule = Schedule(config.epochs * trainer.batches, trainer.batches)
        result = run_loop(trainer, schedule, selection, progress=progress)
        model.load_state_dict(result.best)
        model.finish_training(x_all, config.k, config.batch_size)
    model.eval()
    return model, result.state.history


@torch.no_grad()
def reconstruct(
    model: SparseAutoencoder, x: np.ndarray, k: int, batch_size: int = 4096
) -> np.ndarray:
    """decode(encode(x, k)) as float32 [N, D]: one per-sample k for every kind."""
    rows = checked_rows(x, "input")
    if rows.shape[1] != model.dim:
        raise ValueError(f"input rows have dim {rows.shape[1]}, the SAE expects {model.dim}")
    checked_k(k, model.n_latents)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    was_training = model.training
    model.eval()
    device = model.w_dec.device
    out = np.empty_like(rows)
    for start in range(0, len(rows), batch_size):
        chunk = torch.as_tensor(rows[start : start + batch_size], device=device)
        out[start : start + len(chunk)] = model(chunk, k).cpu().numpy()
    model.train(was_training)
    return out
