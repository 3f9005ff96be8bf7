"""Sparse-autoencoder baselines for CEDAR: TopK, BatchTopK, ReLU (L1) and Matryoshka SAEs.

Every SAE maps an embedding x ∈ R^D to M = expansion·D non-negative codes f and back:

    x' = s·x                                    (one scalar s with E‖x'‖² = D, April update)
    f  = σ(W_enc (x' − b_dec) + b_enc)          (σ depends on the kind, see SparseAutoencoder)
    x̂  = (W_dec f + b_dec) / s

All methods are compared at the same number of active features per sample: `reconstruct` keeps
the k largest codes of each row for every kind (the ReLU SAE included), whatever sparsity
mechanism the kind was trained with. Validation FVU, for early stopping, is the project's one
definition (`training.core.metrics.fraction_of_variance_unexplained`) at `SaeConfig.k`.

References: Gao et al. 2024, "Scaling and evaluating sparse autoencoders" (TopK, AuxK);
Bussmann, Leask & Nanda 2024, "BatchTopK Sparse Autoencoders"; Bricken et al. 2023, "Towards
Monosemanticity", and Conerly et al. 2024, "Circuits Updates – April 2024" (ReLU + L1);
Bussmann et al. 2025, "Learning Multi-Level Features with Matryoshka Sparse Autoencoders", and
Nabeshima 2024, "Matryoshka Sparse Autoencoders" (Matryoshka).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from training.cedar.train import draw_k
from training.core.metrics import fraction_of_variance_unexplained

log = logging.getLogger(__name__)

SAE_KINDS = ("topk", "batchtopk", "relu", "matryoshka")
UNIT_NORM_KINDS = ("topk", "batchtopk", "matryoshka")  # decoder columns kept at ‖d_i‖ = 1
AUX_COEFFICIENT = 1 / 32  # α of the AuxK loss (Gao et al. 2024)
L1_WARMUP = 0.05  # share of the steps over which λ ramps up from 0 (April update)


@dataclass(frozen=True)
class SaeConfig:
    """How one SAE baseline is trained.

    `l1` (ReLU kind only) is λ on the April-update scale: inputs rescaled to E‖x‖² = D (s = √D
    for L2-normalised embeddings). On MiniLM caption embeddings (D = 384, 36k rows, 20 epochs)
    λ = 1 / 2 / 3 gave a natural L0 of 140 / 68 / 46 and FVU at k = 32 of 0.185 / 0.173 / 0.200,
    hence 2 (the paper's 5 is sparser still, and by that trend worse at k = 32).

    With `k_range`, every batch draws its own k log-uniformly from [lo, hi] (TopK, BatchTopK,
    Matryoshka); early stopping always uses the validation FVU at `k`.
    """

    kind: str
    expansion: int = 8
    k: int = 32
    k_range: tuple[int, int] | None = None
    l1: float = 2.0
    lr: float = 1e-3
    batch_size: int = 1024
    epochs: int = 30
    patience: int = 3
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.kind not in SAE_KINDS:
            raise ValueError(f"unknown SAE kind {self.kind!r}; expected one of {SAE_KINDS}")
        positive = {
            "expansion": self.expansion,
            "k": self.k,
            "batch_size": self.batch_size,
            "epochs": self.epochs,
            "patience": self.patience,
        }
        for name, value in positive.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.k_range is not None:
            if len(self.k_range) != 2:
                raise ValueError(f"k_range must be (lo, hi), got {self.k_range!r}")
            lo, hi = self.k_range
            if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
                raise ValueError(f"k_range must be integers 1 <= lo <= hi, got {self.k_range!r}")
            object.__setattr__(self, "k_range", (lo, hi))
        if not (math.isfinite(self.l1) and self.l1 >= 0):
            raise ValueError(f"l1 must be finite and >= 0, got {self.l1!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be finite and > 0, got {self.lr!r}")

    def largest_k(self) -> int:
        """The largest k training or validation will ask for."""
        return max(self.k, self.k_range[1]) if self.k_range else self.k


def matryoshka_prefixes(n_latents: int) -> tuple[int, ...]:
    """Nested dictionary sizes M/16, M/8, M/4, M/2, M (rounded down, at least 1, distinct)."""
    return tuple(sorted({max(1, n_latents // 2**j) for j in (4, 3, 2, 1, 0)}))


def per_sample_top_k(acts: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest entries of every row, zero the rest (TopK, Gao et al. 2024)."""
    values, indices = acts.topk(k, dim=1)
    return torch.zeros_like(acts).scatter(1, indices, values)


def batch_top_k(acts: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k·B largest entries of the whole [B, M] batch (BatchTopK, Bussmann et al. 2024)."""
    flat = acts.flatten()
    values, indices = flat.topk(min(k * acts.shape[0], flat.numel()))
    return torch.zeros_like(flat).scatter(0, indices, values).view_as(acts)


class SparseAutoencoder(torch.nn.Module):
    """One SAE of any kind in SAE_KINDS; codes f = σ(W_enc(x' − b_dec) + b_enc) ≥ 0, x' = s·x.

    - **topk** (Gao et al. 2024): σ = ReLU ∘ TopK_k per sample; unit-norm decoder columns;
      loss = ‖x' − x̂'‖² / E‖x' − x̄'‖² (normalised MSE) + α·AuxK.
    - **batchtopk** (Bussmann et al. 2024): in training σ keeps the k·B largest ReLU activations
      of the batch; at inference (`encode(x)` without k) a JumpReLU at θ, the mean over training
      batches of the smallest kept activation; same loss as TopK.
    - **relu** (Towards Monosemanticity / April update 2024): σ = ReLU;
      loss = ‖x' − x̂'‖² + λ Σ_i f_i‖d_i‖ with unconstrained decoder columns d_i. The codes
      returned by `encode` are f_i‖d_i‖ with the decoder directions d_i/‖d_i‖ (the same x̂), so
      they are exactly the penalised quantities and comparable across latents; `train_sae` folds
      the norms into the weights at the end, leaving unit-norm columns.
    - **matryoshka** (Bussmann et al. 2025; Nabeshima 2024): BatchTopK codes, and the loss sums
      the normalised MSE of the reconstructions from the first m latents, m ∈ {M/16, M/8, M/4,
      M/2, M}, so early latents must reconstruct on their own (+ α·AuxK).

    AuxK (Gao et al. 2024): latents that have not fired for an epoch are dead; the k_aux = D/2
    largest dead pre-activations reconstruct the residual x' − x̂', weighted by α = 1/32.
    `encode(x, k)` with k given is the per-sample top-k for every kind.
    """

    def __init__(self, kind: str, dim: int, n_latents: int, k: int = 32, seed: int = 0) -> None:
        super().__init__()
        if kind not in SAE_KINDS:
            raise ValueError(f"unknown SAE kind {kind!r}; expected one of {SAE_KINDS}")
        if dim < 1 or n_latents < 1:
            raise ValueError(f"dim and n_latents must be >= 1, got {dim} and {n_latents}")
        self.kind, self.dim, self.n_latents = kind, dim, n_latents
        self.k = _checked_k(k, n_latents)
        self.prefixes = matryoshka_prefixes(n_latents) if kind == "matryoshka" else (n_latents,)
        generator = torch.Generator().manual_seed(seed)
        directions = torch.randn(dim, n_latents, generator=generator)
        directions = directions / directions.norm(dim=0, keepdim=True).clamp_min(1e-12)
        if kind == "relu":
            # April update: column norms "0.05 to 1 depending on the dimensions"; √(2D/M) makes
            # the initial reconstruction Σ_i ReLU(d_i·z) d_i ≈ z for random directions.
            directions = directions * min(1.0, math.sqrt(2 * dim / n_latents))
        self.w_dec = torch.nn.Parameter(directions)  # [D, M], column i is latent i's direction
        self.w_enc = torch.nn.Parameter(directions.T.clone())  # [M, D], tied at init
        self.b_enc = torch.nn.Parameter(torch.zeros(n_latents))
        self.b_dec = torch.nn.Parameter(torch.zeros(dim))
        self.register_buffer("input_scale", torch.tensor(1.0))
        self.register_buffer("threshold", torch.tensor(-1.0))  # < 0: not estimated yet

    # -- the map -------------------------------------------------------------------------------
    def activations(self, x: torch.Tensor) -> torch.Tensor:
        """Dense non-negative activations [N, M] before any top-k (f_i‖d_i‖ for the ReLU kind)."""
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"expected rows [N, {self.dim}], got {tuple(x.shape)}")
        # W_enc(x' − b_dec) as W_enc x' − W_enc b_dec: x' needs no gradient, so the backward
        # pass skips one [N, M] × [M, D] product
        pre = (x * self.input_scale) @ self.w_enc.T - self.w_enc @ self.b_dec + self.b_enc
        acts = torch.relu(pre)
        return acts * self._column_norms() if self.kind == "relu" else acts

    def encode(self, x: torch.Tensor, k: int | None = None) -> torch.Tensor:
        """Codes [N, M] ≥ 0. With k: the k largest activations of each row, for every kind.

        Without k: TopK keeps its own k; BatchTopK and Matryoshka apply their threshold θ
        (per-sample top-k at the model's k while θ is not estimated); ReLU keeps everything.
        """
        acts = self.activations(x)
        if k is not None:
            return per_sample_top_k(acts, _checked_k(k, self.n_latents))
        if self.kind == "relu":
            return acts
        if self.kind == "topk" or self.threshold < 0:
            return per_sample_top_k(acts, self.k)
        return acts * (acts > self.threshold)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """x̂ [N, D] = (W_dec f + b_dec) / s, with unit-norm directions for every kind."""
        return self._decode_scaled(codes) / self.input_scale

    def forward(self, x: torch.Tensor, k: int | None = None) -> torch.Tensor:
        return self.decode(self.encode(x, k))

    def dictionary(self) -> torch.Tensor:
        """The decoder directions [D, M] that multiply the codes (unit-norm columns)."""
        if self.kind == "relu":
            return self.w_dec / self._column_norms()
        return self.w_dec

    def _column_norms(self) -> torch.Tensor:
        return self.w_dec.norm(dim=0).clamp_min(1e-12)

    def _decode_scaled(self, codes: torch.Tensor) -> torch.Tensor:
        return codes @ self.dictionary().T + self.b_dec

    # -- training --------------------------------------------------------------------------------
    def training_codes(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes, dense activations) as the kind is trained: per-sample or batch top-k, or ReLU."""
        acts = self.activations(x)
        if self.kind == "relu":
            return acts, acts
        if self.kind == "topk":
            return per_sample_top_k(acts, k), acts
        return batch_top_k(acts, k), acts

    @torch.no_grad()
    def calibrate_threshold(self, x: torch.Tensor, k: int, batch_size: int) -> float:
        """θ = mean over batches of the smallest activation BatchTopK keeps (Bussmann et al.
        2024), measured with the final weights; `encode(x)` without k is then a JumpReLU at θ."""
        smallest = []
        for start in range(0, len(x), batch_size):
            codes = batch_top_k(self.activations(x[start : start + batch_size]), k)
            kept = codes[codes > 0]
            if kept.numel():
                smallest.append(float(kept.min()))
        self.threshold.fill_(float(np.mean(smallest)) if smallest else 0.0)
        return float(self.threshold)

    def reconstruction_loss(
        self, x: torch.Tensor, codes: torch.Tensor, variance: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, x̂' in scaled space). Normalised MSE, summed over nested prefixes for Matryoshka;
        plain MSE (sum over dims, mean over rows) for ReLU, whose λ is set on that scale."""
        target = x * self.input_scale
        if self.kind == "relu":
            recon = self._decode_scaled(codes)
            return (target - recon).square().sum(dim=1).mean(), recon
        sizes = np.diff((0, *self.prefixes)).tolist()
        recon = self.b_dec.expand_as(target)
        loss = target.new_zeros(())
        groups = zip(codes.split(sizes, dim=1), self.dictionary().split(sizes, dim=1), strict=True)
        for group_codes, group_directions in groups:
            recon = recon + group_codes @ group_directions.T
            loss = loss + (target - recon).square().sum(dim=1).mean() / variance
        return loss, recon

    def aux_loss(
        self,
        x: torch.Tensor,
        recon: torch.Tensor,
        acts: torch.Tensor,
        dead: torch.Tensor,
        variance: float,
    ) -> torch.Tensor:
        """AuxK: the top-k_aux dead latents (k_aux = D/2) reconstruct the residual x' − x̂'."""
        n_dead = int(dead.sum())
        if n_dead == 0:
            return x.new_zeros(())
        residual = (x * self.input_scale - recon).detach()
        dead_acts = acts * dead
        aux_codes = per_sample_top_k(dead_acts, min(max(1, self.dim // 2), n_dead))
        aux_recon = aux_codes @ self.dictionary().T
        return (residual - aux_recon).square().sum(dim=1).mean() / variance

    @torch.no_grad()
    def normalise_decoder(self) -> None:
        """Unit-norm decoder columns (TopK, BatchTopK, Matryoshka), after each step."""
        self.w_dec /= self._column_norms()

    @torch.no_grad()
    def remove_parallel_gradient(self) -> None:
        """Drop the part of ∂L/∂d_i along d_i, which the unit-norm constraint undoes anyway."""
        if self.w_dec.grad is not None:
            grad, w = self.w_dec.grad, self.w_dec
            grad -= w * (grad * w).sum(dim=0, keepdim=True)

    @torch.no_grad()
    def fold_decoder_norms(self) -> None:
        """Move ‖d_i‖ into the encoder (ReLU(c·z) = c·ReLU(z)): same codes and x̂, unit columns."""
        norms = self._column_norms()
        self.w_enc *= norms[:, None]
        self.b_enc *= norms
        self.w_dec /= norms


def train_sae(
    train: np.ndarray, val: np.ndarray, config: SaeConfig, progress: bool = True
) -> tuple[SparseAutoencoder, list[dict]]:
    """Train one SAE on float rows [N, D]; return the best-validation model and the history.

    Adam at `config.lr`; each epoch shuffles with a seeded torch.Generator, so a seed gives the
    same weights on the same device. After every epoch the validation FVU at `config.k`
    (per-sample top-k, `reconstruct`) is measured; training stops after `config.patience` epochs
    without improvement and the best epoch's weights are returned. History rows: epoch,
    train_loss (mean over the epoch's batches, the kind's own loss), val_fvu, l0 (mean active
    latents per sample in training), dead_fraction, seconds (that epoch's wall time).
    """
    train_rows = _checked_rows(train, "training")
    val_rows = _checked_rows(val, "validation")
    if val_rows.shape[1] != train_rows.shape[1]:
        raise ValueError(
            f"validation rows have dim {val_rows.shape[1]}, training rows {train_rows.shape[1]}"
        )
    if len(val_rows) < 2:
        raise ValueError("validation needs at least 2 rows (FVU is undefined for one)")
    dim = train_rows.shape[1]
    n_latents = config.expansion * dim
    _checked_k(config.largest_k(), n_latents)
    device = torch.device(config.device)

    model = SparseAutoencoder(config.kind, dim, n_latents, k=config.k, seed=config.seed)
    x_all = torch.as_tensor(train_rows, device=device)
    with torch.no_grad():
        mean = x_all.mean(dim=0)
        variance = float((x_all - mean).square().sum(dim=1).mean())
        if variance <= 0:
            raise ValueError("training rows are all identical: nothing to reconstruct")
        scale = math.sqrt(dim / float(x_all.square().sum(dim=1).mean()))  # E‖x'‖² = D
        variance *= scale**2  # E‖x' − x̄'‖², the normaliser of the normalised MSE
        model.input_scale.fill_(scale)
        model.b_dec.copy_(mean * scale)  # Gao et al. start at the geometric median; the mean here
    model.to(device)
    constrained = config.kind in UNIT_NORM_KINDS
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)

    n_rows = len(train_rows)
    batches = max(1, n_rows // config.batch_size)
    total_steps = config.epochs * batches
    last_fired = torch.zeros(n_latents, dtype=torch.long, device=device)
    seen = 0
    best_fvu, best_state, bad_epochs = math.inf, _copy_state(model), 0
    history: list[dict] = []
    for epoch in range(config.epochs):
        started = time.perf_counter()
        generator = torch.Generator().manual_seed(config.seed * 1_000_003 + epoch)
        order = torch.randperm(n_rows, generator=generator).to(device)
        model.train()
        loss_sum, l0_sum = 0.0, 0.0
        bar = tqdm(
            range(batches),
            desc=f"{config.kind} sae epoch {epoch + 1}",
            disable=not progress,
            leave=False,
        )
        for step in bar:
            rows = order[step * config.batch_size : (step + 1) * config.batch_size]
            x = x_all[rows]
            k = _draw_k(config, generator)
            codes, acts = model.training_codes(x, k)
            loss, recon = model.reconstruction_loss(x, codes, variance)
            if config.kind == "relu":
                ramp = min(1.0, (epoch * batches + step + 1) / max(1.0, L1_WARMUP * total_steps))
                loss = loss + config.l1 * ramp * codes.sum(dim=1).mean()
            else:
                dead = (seen - last_fired) >= n_rows
                loss = loss + AUX_COEFFICIENT * model.aux_loss(x, recon, acts, dead, variance)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if constrained:
                model.remove_parallel_gradient()
            optimizer.step()
            if constrained:
                model.normalise_decoder()
            seen += len(rows)
            with torch.no_grad():
                fired = (codes > 0).any(dim=0)
                last_fired[fired] = seen
                l0_sum += float((codes > 0).sum(dim=1).float().mean())
            loss_sum += float(loss.detach())
            bar.set_postfix(loss=f"{loss_sum / (step + 1):.4f}", k=k)
        bar.close()

        val_fvu = fraction_of_variance_unexplained(val_rows, reconstruct(model, val_rows, config.k))
        record = {
            "epoch": epoch + 1,
            "train_loss": loss_sum / batches,
            "val_fvu": val_fvu,
            "l0": l0_sum / batches,
            "dead_fraction": float(((seen - last_fired) >= n_rows).float().mean()),
            "seconds": time.perf_counter() - started,
        }
        history.append(record)
        log.info(
            "%s sae epoch %d: loss %.4f, val FVU@%d %.4f, L0 %.1f, dead %.3f (%.1fs)",
            config.kind,
            epoch + 1,
            record["train_loss"],
            config.k,
            val_fvu,
            record["l0"],
            record["dead_fraction"],
            record["seconds"],
        )
        if val_fvu < best_fvu:
            best_fvu, best_state, bad_epochs = val_fvu, _copy_state(model), 0
        else:
            bad_epochs += 1
            if bad_epochs >= config.patience:
                break

    model.load_state_dict(best_state)
    if config.kind == "relu":
        model.fold_decoder_norms()
    elif config.kind != "topk":
        model.calibrate_threshold(x_all, config.k, config.batch_size)
    model.eval()
    return model, history


@torch.no_grad()
def reconstruct(
    model: SparseAutoencoder, x: np.ndarray, k: int, batch_size: int = 4096
) -> np.ndarray:
    """decode(encode(x, k)) as float32 [N, D]: one per-sample k for every kind."""
    rows = _checked_rows(x, "input")
    if rows.shape[1] != model.dim:
        raise ValueError(f"input rows have dim {rows.shape[1]}, the SAE expects {model.dim}")
    _checked_k(k, model.n_latents)
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


def _draw_k(config: SaeConfig, generator: torch.Generator) -> int:
    """This batch's k: fixed, or log-uniform in [lo, hi] when `config.k_range` is set (the
    schedule CEDAR's training draws from, `training.cedar.train.draw_k`)."""
    if config.k_range is None:
        return config.k
    return draw_k(*config.k_range, generator)


def _checked_k(k: int, n_latents: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= n_latents:
        raise ValueError(f"k must be an integer in [1, {n_latents}] (the latents), got {k!r}")
    return int(k)


def _checked_rows(rows: np.ndarray, what: str) -> np.ndarray:
    """float32 [N, D] with N, D >= 1 and only finite values, or ValueError naming the fault."""
    try:
        array = np.asarray(rows, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{what} rows are not numeric: {error}") from error
    if array.ndim != 2:
        raise ValueError(f"{what} rows must be 2-d [N, D], got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{what} rows are empty (shape {array.shape})")
    if not np.isfinite(array).all():
        raise ValueError(f"{what} rows contain NaN or infinite values")
    return np.ascontiguousarray(array)


def _copy_state(model: SparseAutoencoder) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in model.state_dict().items()}
