"""Training the coupled model on the shared loop (`training.loop`).

Every step draws, with a seeded generator:
- an unpaired batch of each domain (independently: no pairing is visible in them), for
  reconstruction, distributional alignment, cycle consistency and AuxK;
- a batch of the paired subset (drawn with replacement: it may hold only a handful of pairs),
  for instance translation and concept consistency;
and takes one Adam step on the weighted objective (`training.cosae.objective`), keeping the
decoder columns unit-norm (the TopK SAE's constraint). Fixed number of steps, no model
selection (selection on validation pairs would use more pairs than the paired fraction says).
Resumable: a checkpoint every `log_every` steps holds the weights, Adam and the generator.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from training.core.metrics import fraction_of_variance_unexplained
from training.core.seeding import seeded
from training.cosae.config import CosaeConfig
from training.cosae.losses import random_directions
from training.cosae.model import CoupledSae, reconstruct_rows
from training.cosae.objective import (
    CoupledBatch,
    DomainScale,
    coupled_objective,
    prepare_half,
    weighted_total,
)
from training.loop import Checkpointing, Schedule, run_loop
from training.sae.base import constrained_step


@dataclass
class CoupledResult:
    model: CoupledSae
    steps_run: int
    seconds: float
    history: list[dict[str, float]] = field(default_factory=list)


class CoupledTrainer:
    """CoSAE's step, its record every `log_every` steps and its checkpoint, for `run_loop`."""

    label = "cosae"

    def __init__(
        self,
        model: CoupledSae,
        data: tuple[torch.Tensor, torch.Tensor],
        pairs: torch.Tensor,
        scales: tuple[DomainScale, DomainScale],
        config: CosaeConfig,
        val: tuple[np.ndarray, np.ndarray] | None,
    ) -> None:
        self.model, self.data, self.pairs, self.scales = model, data, pairs, scales
        self.config, self.val = config, val
        self.optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.last_fired = [torch.zeros(config.n_concepts, dtype=torch.long) for _ in range(2)]
        self.seen = [0, 0]
        self.dead: tuple[torch.Tensor, ...] = ()

    def begin_round(self, index: int) -> None:
        pass

    def step(self, step: int) -> dict[str, float]:
        model, config, device = self.model, self.config, self.data[0].device
        batch = _draw_batch(*self.data, self.pairs, config, self.generator)
        directions = None
        if config.distribution == "sliced" and config.weights.distribution > 0:
            directions = random_directions(config.n_concepts, config.projections, self.generator)
            directions = directions.to(device)
        seen, last_fired = self.seen, self.last_fired
        self.dead = tuple(
            ((seen[d] - last_fired[d]) >= len(x)).to(device) for d, x in enumerate(self.data)
        )
        parts = coupled_objective(
            model, batch, config.weights, self.scales, config.distribution, directions, self.dead
        )
        loss = weighted_total(parts, config.weights)
        self.optimizer.zero_grad(set_to_none=True)
        if loss.requires_grad:
            loss.backward()
            constrained_step(self.optimizer, (model.domain_i, model.domain_j))
        with torch.no_grad():
            halves = ((model.domain_i, batch.x_i), (model.domain_j, batch.x_j))
            for d, (half, x) in enumerate(halves):
                seen[d] += len(x)
                fired = (half.encode(x) > 0).any(dim=0).cpu()
                last_fired[d][fired] = seen[d]
        return {
            **{name: float(value.detach()) for name, value in parts.items()},
            "total": float(loss.detach()),
        }

    def end_round(self, index: int, step: int, means: dict[str, float]) -> dict[str, float]:
        record = {"step": step, **means}
        record["dead_i"] = float(self.dead[0].float().mean())
        record["dead_j"] = float(self.dead[1].float().mean())
        if self.val is not None:
            for domain, rows in zip(("i", "j"), self.val, strict=True):
                record[f"val_fvu_{domain}"] = fraction_of_variance_unexplained(
                    rows, reconstruct_rows(self.model, rows, domain)
                )
        return record

    def initial_record(self) -> None:
        return None

    def snapshot(self) -> None:
        return None  # no selection: the model as it ends

    def checkpoint_state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "last_fired_i": self.last_fired[0],
            "last_fired_j": self.last_fired[1],
            "seen": list(self.seen),
        }

    def load_checkpoint_state(self, saved: dict[str, Any]) -> None:
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.generator.set_state(saved["generator"].cpu())  # map_location may have moved them
        self.last_fired = [saved["last_fired_i"].cpu(), saved["last_fired_j"].cpu()]
        self.seen = list(saved["seen"])


def train_coupled(
    x_i: np.ndarray,
    x_j: np.ndarray,
    pairs: np.ndarray | None,
    config: CosaeConfig,
    val: tuple[np.ndarray, np.ndarray] | None = None,
    reference: tuple[np.ndarray, np.ndarray] | None = None,
    work_dir: Path | None = None,
    device: str = "cpu",
    progress: bool = False,
) -> CoupledResult:
    """Train the coupled model on the rows of each domain and the known pairs.

    x_i [N_i, D_i] and x_j [N_j, D_j] need not be row-aligned; `pairs` [P, 2] lists the
    (row of x_i, row of x_j) whose correspondence is known (None or empty: no pairs, so only
    the unpaired terms act). `val` (rows of each domain) is scored every `log_every` steps
    (reconstruction FVU per domain: no pairs are used). `reference` (rows of each domain, by
    default x_i and x_j) gives each domain's mean, scale and variance: a model trained on the
    pairs alone still takes them from all the (unlabelled) rows. With `work_dir`, a checkpoint is
    written every `log_every` steps and a rerun with the same config and data resumes from it.
    """
    rows_i, rows_j = _checked_rows(x_i, "domain i"), _checked_rows(x_j, "domain j")
    pair_rows = _checked_pairs(pairs, len(rows_i), len(rows_j))
    with seeded(config.seed):
        model = CoupledSae(
            rows_i.shape[1], rows_j.shape[1], config.n_concepts, config.k_i, config.k_j, config.seed
        )
        stats_i, stats_j = reference if reference is not None else (rows_i, rows_j)
        scales = (
            prepare_half(model.domain_i, torch.as_tensor(_checked_rows(stats_i, "reference i"))),
            prepare_half(model.domain_j, torch.as_tensor(_checked_rows(stats_j, "reference j"))),
        )
        model.to(device)
        data = (torch.as_tensor(rows_i).to(device), torch.as_tensor(rows_j).to(device))
        pair_tensor = torch.as_tensor(pair_rows, device=device)
        trainer = CoupledTrainer(model, data, pair_tensor, scales, config, val)
        data_hash = hashlib.sha256(rows_i.tobytes() + rows_j.tobytes() + pair_rows.tobytes())
        data_hash.update(repr(scales).encode())
        checkpointing = None
        if work_dir:
            fingerprint = data_hash.hexdigest()
            checkpointing = Checkpointing(work_dir, config.fingerprint(), fingerprint, device)
        result = run_loop(
            trainer, Schedule(config.steps, config.log_every), None, checkpointing, progress
        )
    model.eval()
    return CoupledResult(model, result.state.step, result.state.seconds, result.state.history)


def _draw_batch(
    data_i: torch.Tensor,
    data_j: torch.Tensor,
    pairs: torch.Tensor,
    config: CosaeConfig,
    generator: torch.Generator,
) -> CoupledBatch:
    """Independent unpaired batches of each domain, and a paired batch drawn with replacement."""
    size_i, size_j = min(config.batch_size, len(data_i)), min(config.batch_size, len(data_j))
    rows_i = torch.randperm(len(data_i), generator=generator)[:size_i].to(data_i.device)
    rows_j = torch.randperm(len(data_j), generator=generator)[:size_j].to(data_j.device)
    batch = CoupledBatch(data_i[rows_i], data_j[rows_j])
    needs_pairs = config.weights.translation > 0 or config.weights.consistency > 0
    if len(pairs) and needs_pairs:
        chosen = torch.randint(len(pairs), (config.paired_batch_size,), generator=generator)
        chosen = pairs[chosen.to(pairs.device)]
        batch.pair_i, batch.pair_j = data_i[chosen[:, 0]], data_j[chosen[:, 1]]
    return batch


def _checked_rows(rows: np.ndarray, what: str) -> np.ndarray:
    array = np.ascontiguousarray(rows, dtype=np.float32)
    if array.ndim != 2 or len(array) < 1 or array.shape[1] < 1:
        raise ValueError(f"{what} needs a non-empty [N, D] array, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{what} holds NaN or Inf")
    return array


def _checked_pairs(pairs: np.ndarray | None, n_i: int, n_j: int) -> np.ndarray:
    if pairs is None:
        return np.zeros((0, 2), dtype=np.int64)
    array = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if len(array) and (array.min() < 0 or array[:, 0].max() >= n_i or array[:, 1].max() >= n_j):
        raise ValueError("pairs must index rows of both domains")
    return np.ascontiguousarray(array)
