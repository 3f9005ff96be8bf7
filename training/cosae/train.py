"""Training the coupled model: the config, the objective (weighted loss terms), the loop.

Every step draws, with a seeded generator:
- an unpaired batch of each domain (independently: no pairing is visible in them), for
  reconstruction, distributional alignment, cycle consistency and AuxK;
- a batch of the paired subset (drawn with replacement: it may hold only a handful of pairs),
  for instance translation and concept consistency.

L = w_rec (L_rec,i + L_rec,j) + w_tr (L_tr,i→j + L_tr,j→i) + w_cc L_cc + w_dist L_dist
    + w_cyc (L_cyc,i + L_cyc,j) + w_aux (AuxK_i + AuxK_j)

(`training.cosae.losses`). A term whose weight is 0 is not computed at all, so it adds neither
value nor gradient. Concept consistency compares the dense ReLU activations of the two items of
a pair (before TopK), so a concept that fires in one domain is pulled up in the other even when
it is not yet among the other's top k; the distributional terms compare the TopK codes.
Adam; unit-norm decoder columns (the TopK SAE's constraint). Fixed number of steps, no model
selection (selection on validation pairs would use more pairs than the paired fraction says).
Resumable: a checkpoint every `log_every` steps holds the weights, Adam and the generator.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, Field, model_validator
from tqdm import tqdm

from training.cedar.saes import AUX_COEFFICIENT, SparseAutoencoder
from training.checkpoints import load_checkpoint, save_checkpoint
from training.core.metrics import fraction_of_variance_unexplained
from training.cosae.losses import (
    concept_consistency_loss,
    cycle_loss,
    energy_alignment_loss,
    random_directions,
    reconstruction_loss,
    sliced_wasserstein_loss,
    sorted_wasserstein_loss,
    translation_loss,
)
from training.cosae.model import CoupledSae, reconstruct_rows

log = logging.getLogger(__name__)

DISTRIBUTION_KINDS = ("energy", "sorted", "sliced")
Distribution = Literal["energy", "sorted", "sliced"]


class LossWeights(BaseModel):
    """The weight of each term; 0 switches the term off (not computed, no gradient)."""

    reconstruction: float = Field(1.0, ge=0)
    translation: float = Field(1.0, ge=0)
    consistency: float = Field(0.1, ge=0)
    distribution: float = Field(0.5, ge=0)
    cycle: float = Field(0.0, ge=0)
    aux: float = Field(AUX_COEFFICIENT, ge=0, description="AuxK of each domain (dead concepts)")

    def active(self) -> dict[str, float]:
        """The terms that are on, with their weights."""
        return {name: value for name, value in self.model_dump().items() if value > 0}


class CosaeConfig(BaseModel):
    n_concepts: int = Field(2048, ge=1, description="M: the shared concept dictionary size")
    k_i: int = Field(32, ge=1, description="active concepts per row of domain i (TopK)")
    k_j: int = Field(32, ge=1, description="active concepts per row of domain j (TopK)")
    weights: LossWeights = Field(default_factory=LossWeights)
    distribution: Distribution = "sliced"
    projections: int = Field(64, ge=1, description="directions per step, sliced Wasserstein")
    paired_fraction: float = Field(
        0.01, gt=0, le=1, description="share of the training rows whose pair is known"
    )
    steps: int = Field(4000, ge=1)
    batch_size: int = Field(512, ge=2, description="unpaired rows per domain per step")
    paired_batch_size: int = Field(256, ge=1, description="pairs per step (with replacement)")
    learning_rate: float = Field(1e-3, gt=0)
    log_every: int = Field(500, ge=1, description="steps between validation and checkpoint")
    seed: int = 0

    @model_validator(mode="after")
    def _k_within_concepts(self) -> CosaeConfig:
        for name in ("k_i", "k_j"):
            if getattr(self, name) > self.n_concepts:
                raise ValueError(
                    f"{name} = {getattr(self, name)} exceeds n_concepts = {self.n_concepts}"
                )
        return self

    def fingerprint(self) -> str:
        """Identifies a run for resuming; `steps` and `log_every` are left out, so a finished
        run can be continued for more steps from its checkpoint."""
        payload = self.model_dump_json(exclude={"steps", "log_every"})
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class DomainScale:
    """A domain's training statistics: E‖x − x̄‖² in the input's units, and the SAE's s."""

    variance: float
    input_scale: float


@dataclass
class CoupledBatch:
    """One step's rows: unpaired batches of each domain, and the two sides of a paired batch."""

    x_i: torch.Tensor
    x_j: torch.Tensor
    pair_i: torch.Tensor | None = None
    pair_j: torch.Tensor | None = None


def prepare_half(half: SparseAutoencoder, rows: torch.Tensor) -> DomainScale:
    """Set s (E‖s·x‖² = D) and b_dec = s·x̄ as `train_sae` does; return the domain's scale."""
    with torch.no_grad():
        mean = rows.mean(dim=0)
        variance = float((rows - mean).square().sum(dim=1).mean())
        if not variance > 0:
            raise ValueError("a domain's training rows are all identical: nothing to learn")
        scale = math.sqrt(half.dim / float(rows.square().sum(dim=1).mean()))
        half.input_scale.fill_(scale)
        half.b_dec.copy_(mean * scale)
    return DomainScale(variance, scale)


def coupled_objective(
    model: CoupledSae,
    batch: CoupledBatch,
    weights: LossWeights,
    scales: tuple[DomainScale, DomainScale],
    distribution: Distribution = "sliced",
    directions: torch.Tensor | None = None,
    dead: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """The unweighted value of every term whose weight is > 0 (nothing else is computed).

    Terms needing pairs are skipped when the batch has none; `directions` [M, P] is needed by
    the sliced distribution term, `dead` (one boolean mask per domain) by AuxK.
    """
    active = weights.active()
    half_i, half_j = model.domain_i, model.domain_j
    scale_i, scale_j = scales
    codes_i, acts_i = half_i.training_codes(batch.x_i, half_i.k)
    codes_j, acts_j = half_j.training_codes(batch.x_j, half_j.k)
    recon_i, recon_j = half_i.decode(codes_i), half_j.decode(codes_j)
    parts: dict[str, torch.Tensor] = {}
    if "reconstruction" in active:
        parts["reconstruction"] = reconstruction_loss(
            batch.x_i, recon_i, scale_i.variance
        ) + reconstruction_loss(batch.x_j, recon_j, scale_j.variance)
    has_pairs = batch.pair_i is not None and batch.pair_j is not None and len(batch.pair_i) > 0
    if has_pairs and ("translation" in active or "consistency" in active):
        pair_codes_i, pair_acts_i = half_i.training_codes(batch.pair_i, half_i.k)
        pair_codes_j, pair_acts_j = half_j.training_codes(batch.pair_j, half_j.k)
        if "translation" in active:
            parts["translation"] = translation_loss(
                batch.pair_j, half_j.decode(pair_codes_i), scale_j.variance
            ) + translation_loss(batch.pair_i, half_i.decode(pair_codes_j), scale_i.variance)
        if "consistency" in active:
            parts["consistency"] = concept_consistency_loss(pair_acts_i, pair_acts_j)
    if "distribution" in active:
        parts["distribution"] = distribution_loss(codes_i, codes_j, distribution, directions)
    if "cycle" in active:
        back_i = half_i.decode(half_j.training_codes(half_j.decode(codes_i), half_j.k)[0])
        back_j = half_j.decode(half_i.training_codes(half_i.decode(codes_j), half_i.k)[0])
        parts["cycle"] = cycle_loss(batch.x_i, back_i, scale_i.variance) + cycle_loss(
            batch.x_j, back_j, scale_j.variance
        )
    if "aux" in active and dead is not None:
        aux = batch.x_i.new_zeros(())
        for half, x, recon, acts, mask, scale in (
            (half_i, batch.x_i, recon_i, acts_i, dead[0], scale_i),
            (half_j, batch.x_j, recon_j, acts_j, dead[1], scale_j),
        ):
            scaled_variance = scale.variance * scale.input_scale**2
            aux = aux + half.aux_loss(x, recon * half.input_scale, acts, mask, scaled_variance)
        parts["aux"] = aux
    return parts


def distribution_loss(
    codes_i: torch.Tensor,
    codes_j: torch.Tensor,
    kind: Distribution,
    directions: torch.Tensor | None = None,
) -> torch.Tensor:
    """The pluggable distributional term: `energy`, `sorted` (per-concept W₁) or `sliced`."""
    if kind == "energy":
        return energy_alignment_loss(codes_i, codes_j)
    if kind == "sorted":
        return sorted_wasserstein_loss(codes_i, codes_j)
    if kind == "sliced":
        if directions is None:
            raise ValueError("the sliced distribution term needs directions")
        return sliced_wasserstein_loss(codes_i, codes_j, directions)
    raise ValueError(f"unknown distribution term {kind!r}; expected one of {DISTRIBUTION_KINDS}")


def weighted_total(parts: dict[str, torch.Tensor], weights: LossWeights) -> torch.Tensor:
    """Σ_t w_t L_t over the computed terms."""
    active = weights.active()
    start = next(iter(parts.values())).new_zeros(()) if parts else torch.zeros(())
    return sum((active[name] * value for name, value in parts.items()), start)


@dataclass
class CoupledResult:
    model: CoupledSae
    steps_run: int
    seconds: float
    history: list[dict[str, float]] = field(default_factory=list)


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
    torch.manual_seed(config.seed)
    model = CoupledSae(
        rows_i.shape[1], rows_j.shape[1], config.n_concepts, config.k_i, config.k_j, config.seed
    )
    data_i, data_j = torch.as_tensor(rows_i), torch.as_tensor(rows_j)
    stats_i, stats_j = reference if reference is not None else (rows_i, rows_j)
    scales = (
        prepare_half(model.domain_i, torch.as_tensor(_checked_rows(stats_i, "reference i"))),
        prepare_half(model.domain_j, torch.as_tensor(_checked_rows(stats_j, "reference j"))),
    )
    model.to(device)
    data_i, data_j = data_i.to(device), data_j.to(device)
    pair_tensor = torch.as_tensor(pair_rows, device=device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    generator = torch.Generator().manual_seed(config.seed)
    last_fired = [torch.zeros(config.n_concepts, dtype=torch.long) for _ in range(2)]
    state: dict = {"step": 0, "seen": [0, 0], "history": [], "seconds": 0.0}
    data_hash = hashlib.sha256(rows_i.tobytes() + rows_j.tobytes() + pair_rows.tobytes())
    data_hash.update(repr(scales).encode())
    fingerprint = data_hash.hexdigest()
    checkpoint = work_dir / "checkpoint.pt" if work_dir else None
    saved = checkpoint and load_checkpoint(checkpoint, config.fingerprint(), fingerprint, device)
    if saved:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        generator.set_state(saved["generator"].cpu())  # map_location may have moved them
        last_fired = [saved["last_fired_i"].cpu(), saved["last_fired_j"].cpu()]
        state = saved["state"]
        log.info("resuming CoSAE training at step %d", state["step"])

    started = time.perf_counter()
    running: dict[str, float] = {}  # sums of each term since the last record, over `window` steps
    window = 0
    bar = tqdm(total=config.steps, initial=state["step"], desc="cosae", disable=not progress)
    while state["step"] < config.steps:
        batch = _draw_batch(data_i, data_j, pair_tensor, config, generator)
        directions = None
        if config.distribution == "sliced" and config.weights.distribution > 0:
            directions = random_directions(config.n_concepts, config.projections, generator)
            directions = directions.to(device)
        seen = state["seen"]
        dead = tuple(
            ((seen[d] - last_fired[d]) >= n).to(device)
            for d, n in enumerate((len(rows_i), len(rows_j)))
        )
        parts = coupled_objective(
            model, batch, config.weights, scales, config.distribution, directions, dead
        )
        loss = weighted_total(parts, config.weights)
        optimizer.zero_grad(set_to_none=True)
        if loss.requires_grad:
            loss.backward()
            for half in (model.domain_i, model.domain_j):
                half.remove_parallel_gradient()
            optimizer.step()
            for half in (model.domain_i, model.domain_j):
                half.normalise_decoder()
        with torch.no_grad():
            halves = ((model.domain_i, batch.x_i), (model.domain_j, batch.x_j))
            for d, (half, x) in enumerate(halves):
                seen[d] += len(x)
                fired = (half.encode(x) > 0).any(dim=0).cpu()
                last_fired[d][fired] = seen[d]
        for name, value in parts.items():
            running[name] = running.get(name, 0.0) + float(value.detach())
        running["total"] = running.get("total", 0.0) + float(loss.detach())
        window += 1
        state["step"] += 1
        bar.update(1)
        if state["step"] % config.log_every == 0 or state["step"] == config.steps:
            record = {"step": state["step"], **{n: v / window for n, v in running.items()}}
            record["dead_i"] = float(dead[0].float().mean())
            record["dead_j"] = float(dead[1].float().mean())
            if val is not None:
                record["val_fvu_i"] = fraction_of_variance_unexplained(
                    val[0], reconstruct_rows(model, val[0], "i")
                )
                record["val_fvu_j"] = fraction_of_variance_unexplained(
                    val[1], reconstruct_rows(model, val[1], "j")
                )
            state["history"].append(record)
            running, window = {}, 0
            log.info("cosae %s", ", ".join(f"{n} {v:.4g}" for n, v in record.items()))
            state["seconds"] += time.perf_counter() - started
            started = time.perf_counter()
            if checkpoint:
                save_checkpoint(
                    checkpoint, config.fingerprint(), fingerprint,
                    {
                        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "generator": generator.get_state(), "last_fired_i": last_fired[0],
                        "last_fired_j": last_fired[1], "state": state,
                    },
                )  # fmt: skip
    bar.close()
    model.eval()
    return CoupledResult(model, state["step"], state["seconds"], state["history"])


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
