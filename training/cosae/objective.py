"""CoSAE's objective: the weighted loss terms of one step on the two halves (`coupled_objective`).

L = w_rec (L_rec,i + L_rec,j) + w_tr (L_tr,i→j + L_tr,j→i) + w_cc L_cc + w_dist L_dist
    + w_cyc (L_cyc,i + L_cyc,j) + w_aux (AuxK_i + AuxK_j)

(`training.cosae.losses`). A term whose weight is 0 is not computed at all, so it adds neither
value nor gradient. Concept consistency compares the dense ReLU activations of the two items of
a pair (before TopK), so a concept that fires in one domain is pulled up in the other even when
it is not yet among the other's top k; the distributional terms compare the TopK codes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from training.cosae.config import DISTRIBUTION_KINDS, Distribution, LossWeights
from training.cosae.losses import (
    concept_consistency_loss,
    cycle_loss,
    energy_alignment_loss,
    reconstruction_loss,
    sliced_wasserstein_loss,
    sorted_wasserstein_loss,
    translation_loss,
)
from training.cosae.model import CoupledSae
from training.sae.base import SparseAutoencoder, prepare_scale


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
    return DomainScale(*prepare_scale(half, rows))


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
