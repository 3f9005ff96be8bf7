"""The sparse autoencoder every variant shares: the map, the dictionary, the loss pieces.

Every SAE maps an embedding x ∈ R^D to M non-negative codes f and back:

    x' = s·x                                    (one scalar s with E‖x'‖² = D, April update)
    f  = σ(W_enc (x' − b_dec) + b_enc)          (σ is the variant's: ReLU ∘ TopK, BatchTopK, ...)
    x̂  = (W_dec f + b_dec) / s

A variant (one small sibling per file of this package) says how it sparsifies in training
(`sparsify`) and at inference (`inference_codes`), and may change the activations, the
reconstruction loss, the penalty and what happens after training. All variants keep one state
layout (w_enc, b_enc, w_dec, b_dec, input_scale, threshold), so every saved SAE loads as before.
`encode(x, k)` with k given is the per-sample top-k for every variant: methods are compared at
the same number of active features per sample whatever mechanism they were trained with.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

AUX_COEFFICIENT = 1 / 32  # α of the AuxK loss (Gao et al. 2024)


def per_sample_top_k(acts: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest entries of every row, zero the rest (TopK, Gao et al. 2024)."""
    values, indices = acts.topk(k, dim=1)
    return torch.zeros_like(acts).scatter(1, indices, values)


def draw_k(low: int, high: int, generator: torch.Generator) -> int:
    """k log-uniform in [low, high] (integers), so small k is drawn as often as large."""
    u = torch.rand((), generator=generator).item()
    return int(min(high, max(low, round(math.exp(math.log(low) + u * math.log(high / low))))))


def batch_top_k(acts: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k·B largest entries of the whole [B, M] batch (BatchTopK, Bussmann et al. 2024)."""
    flat = acts.flatten()
    values, indices = flat.topk(min(k * acts.shape[0], flat.numel()))
    return torch.zeros_like(flat).scatter(0, indices, values).view_as(acts)


@dataclass(frozen=True)
class PenaltyInputs:
    """What a variant's training penalty may need: the batch x, its codes and dense activations,
    the reconstruction x̂', the normaliser E‖x' − x̄'‖², the dead latents (AuxK), the position
    in the run (a warm-up) and λ (L1)."""

    x: torch.Tensor
    codes: torch.Tensor
    acts: torch.Tensor
    recon: torch.Tensor
    variance: float
    dead: torch.Tensor
    step: int
    total_steps: int
    l1: float


class SparseAutoencoder(torch.nn.Module):
    """The shared SAE; subclasses set `kind` and their sparsity (see the package's variants)."""

    kind: ClassVar[str]
    unit_norm_decoder: ClassVar[bool] = True  # ‖d_i‖ = 1 kept after every step

    def __init__(self, dim: int, n_latents: int, k: int = 32, seed: int = 0) -> None:
        super().__init__()
        if dim < 1 or n_latents < 1:
            raise ValueError(f"dim and n_latents must be >= 1, got {dim} and {n_latents}")
        self.dim, self.n_latents = dim, n_latents
        self.k = checked_k(k, n_latents)
        self.prefixes = self.nested_sizes(n_latents)
        generator = torch.Generator().manual_seed(seed)
        directions = torch.randn(dim, n_latents, generator=generator)
        directions = directions / directions.norm(dim=0, keepdim=True).clamp_min(1e-12)
        directions = self.initial_directions(directions)
        self.w_dec = torch.nn.Parameter(directions)  # [D, M], column i is latent i's direction
        self.w_enc = torch.nn.Parameter(directions.T.clone())  # [M, D], tied at init
        self.b_enc = torch.nn.Parameter(torch.zeros(n_latents))
        self.b_dec = torch.nn.Parameter(torch.zeros(dim))
        self.register_buffer("input_scale", torch.tensor(1.0))
        self.register_buffer("threshold", torch.tensor(-1.0))  # < 0: not estimated yet

    # -- what a variant chooses ------------------------------------------------------------------
    @staticmethod
    def nested_sizes(n_latents: int) -> tuple[int, ...]:
        """The nested dictionary sizes the reconstruction loss sums over (one: all M)."""
        return (n_latents,)

    def initial_directions(self, directions: torch.Tensor) -> torch.Tensor:
        """The decoder at init from unit random directions (kept unit by default)."""
        return directions

    def sparsify(self, acts: torch.Tensor, k: int) -> torch.Tensor:
        """The codes of dense activations in training, at k active per row (or on average)."""
        raise NotImplementedError

    def inference_codes(self, acts: torch.Tensor) -> torch.Tensor:
        """The codes `encode(x)` gives without k."""
        raise NotImplementedError

    def penalty(self, inputs: PenaltyInputs) -> torch.Tensor:
        """The term added to the reconstruction loss in training: α·AuxK by default."""
        i = inputs
        return AUX_COEFFICIENT * self.aux_loss(i.x, i.recon, i.acts, i.dead, i.variance)

    @torch.no_grad()
    def finish_training(self, x: torch.Tensor, k: int, batch_size: int) -> None:
        """After the best weights are restored (nothing by default)."""

    # -- the map ---------------------------------------------------------------------------------
    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """W_enc(x' − b_dec), computed as W_enc x' − W_enc b_dec: x' needs no gradient, so the
        backward pass skips one [N, M] × [M, D] product. Without b_enc."""
        return (x * self.input_scale) @ self.w_enc.T - self.w_enc @ self.b_dec

    def activations(self, x: torch.Tensor) -> torch.Tensor:
        """Dense non-negative activations [N, M] before any top-k: ReLU(W_enc(x' − b_dec) + b)."""
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"expected rows [N, {self.dim}], got {tuple(x.shape)}")
        return torch.relu(self.pre_activations(x) + self.b_enc)

    def training_codes(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes, dense activations) as the variant is trained."""
        acts = self.activations(x)
        return self.sparsify(acts, k), acts

    def encode(self, x: torch.Tensor, k: int | None = None) -> torch.Tensor:
        """Codes [N, M] ≥ 0. With k: the k largest activations of each row, for every variant;
        without k: the variant's own (`inference_codes`)."""
        acts = self.activations(x)
        if k is not None:
            return per_sample_top_k(acts, checked_k(k, self.n_latents))
        return self.inference_codes(acts)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """x̂ [N, D] = (W_dec f + b_dec) / s, with unit-norm directions for every variant."""
        return self.decode_scaled(codes) / self.input_scale

    def forward(self, x: torch.Tensor, k: int | None = None) -> torch.Tensor:
        return self.decode(self.encode(x, k))

    def dictionary(self) -> torch.Tensor:
        """The decoder directions [D, M] that multiply the codes (unit-norm columns)."""
        return self.w_dec

    def column_norms(self) -> torch.Tensor:
        return self.w_dec.norm(dim=0).clamp_min(1e-12)

    def decode_scaled(self, codes: torch.Tensor) -> torch.Tensor:
        """x̂' = W_dec f + b_dec, in the scaled input space."""
        return codes @ self.dictionary().T + self.b_dec

    # -- the shared loss pieces ------------------------------------------------------------------
    def reconstruction_loss(
        self, x: torch.Tensor, codes: torch.Tensor, variance: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, x̂' in scaled space): Σ_m ‖x' − x̂'_m‖² / E‖x' − x̄'‖² (normalised MSE), x̂'_m
        the reconstruction from the first m latents, m over `prefixes` (one term: all M)."""
        target = x * self.input_scale
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
        """AuxK (Gao et al. 2024): latents that have not fired for an epoch are dead; the
        k_aux = D/2 largest dead activations reconstruct the residual x' − x̂'."""
        n_dead = int(dead.sum())
        if n_dead == 0:
            return x.new_zeros(())
        residual = (x * self.input_scale - recon).detach()
        dead_acts = acts * dead
        aux_codes = per_sample_top_k(dead_acts, min(max(1, self.dim // 2), n_dead))
        aux_recon = aux_codes @ self.dictionary().T
        return (residual - aux_recon).square().sum(dim=1).mean() / variance

    # -- the unit-norm constraint ----------------------------------------------------------------
    @torch.no_grad()
    def normalise_decoder(self) -> None:
        """Unit-norm decoder columns, after each step."""
        self.w_dec /= self.column_norms()

    @torch.no_grad()
    def remove_parallel_gradient(self) -> None:
        """Drop the part of ∂L/∂d_i along d_i, which the unit-norm constraint undoes anyway."""
        if self.w_dec.grad is not None:
            grad, w = self.w_dec.grad, self.w_dec
            grad -= w * (grad * w).sum(dim=0, keepdim=True)


def constrained_step(optimizer: torch.optim.Optimizer, saes: Iterable[SparseAutoencoder]) -> None:
    """One optimiser step that keeps the unit-norm decoders of `saes` unit-norm: the gradient
    along each column is dropped before the step and the columns rescaled after it."""
    constrained = [sae for sae in saes if sae.unit_norm_decoder]
    for sae in constrained:
        sae.remove_parallel_gradient()
    optimizer.step()
    for sae in constrained:
        sae.normalise_decoder()


def prepare_scale(sae: SparseAutoencoder, rows: torch.Tensor) -> tuple[float, float]:
    """Set s (E‖s·x‖² = D) and b_dec = s·x̄ from training rows (Gao et al. start b_dec at the
    geometric median; the mean here); return (E‖x − x̄‖² in the input's units, s)."""
    with torch.no_grad():
        mean = rows.mean(dim=0)
        variance = float((rows - mean).square().sum(dim=1).mean())
        if not variance > 0:
            raise ValueError("training rows are all identical: nothing to reconstruct")
        scale = math.sqrt(sae.dim / float(rows.square().sum(dim=1).mean()))
        sae.input_scale.fill_(scale)
        sae.b_dec.copy_(mean * scale)
    return variance, scale


def checked_k(k: int, n_latents: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= n_latents:
        raise ValueError(f"k must be an integer in [1, {n_latents}] (the latents), got {k!r}")
    return int(k)


def checked_rows(rows: np.ndarray, what: str) -> np.ndarray:
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
