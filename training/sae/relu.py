"""ReLU SAE with an L1 penalty (Bricken et al. 2023, "Towards Monosemanticity"; Conerly et al.
2024, "Circuits Updates – April 2024").

    f = ReLU(W_enc(x' − b_dec) + b_enc)·‖d_i‖        (codes are the penalised quantities)
    L = ‖x' − x̂'‖² + λ(t) Σ_i f_i                    (plain MSE: λ is set on that scale)

with unconstrained decoder columns d_i; the codes are f_i‖d_i‖ against the directions
d_i/‖d_i‖ (the same x̂), so they are comparable across latents. λ(t) ramps up linearly from 0
over the first `L1_WARMUP` of the steps. After training the norms are folded into the encoder
(ReLU(c·z) = c·ReLU(z)), leaving unit-norm columns and the same codes.
"""

from __future__ import annotations

import math

import torch

from training.sae.base import PenaltyInputs, SparseAutoencoder

L1_WARMUP = 0.05  # share of the steps over which λ ramps up from 0 (April update)


class ReluSae(SparseAutoencoder):
    kind = "relu"
    unit_norm_decoder = False

    def initial_directions(self, directions: torch.Tensor) -> torch.Tensor:
        """Column norms "0.05 to 1 depending on the dimensions" (April update): √(2D/M) makes
        the initial reconstruction Σ_i ReLU(d_i·z) d_i ≈ z for random directions."""
        return directions * min(1.0, math.sqrt(2 * self.dim / self.n_latents))

    def activations(self, x: torch.Tensor) -> torch.Tensor:
        return super().activations(x) * self.column_norms()

    def sparsify(self, acts: torch.Tensor, k: int) -> torch.Tensor:
        return acts

    def inference_codes(self, acts: torch.Tensor) -> torch.Tensor:
        return acts

    def dictionary(self) -> torch.Tensor:
        return self.w_dec / self.column_norms()

    def reconstruction_loss(
        self, x: torch.Tensor, codes: torch.Tensor, variance: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(‖x' − x̂'‖² summed over dims, mean over rows; x̂')."""
        recon = self.decode_scaled(codes)
        return (x * self.input_scale - recon).square().sum(dim=1).mean(), recon

    def penalty(self, inputs: PenaltyInputs) -> torch.Tensor:
        """λ(t) Σ_i f_i, mean over rows."""
        warmup = max(1.0, L1_WARMUP * inputs.total_steps)
        ramp = min(1.0, (inputs.step + 1) / warmup)
        return inputs.l1 * ramp * inputs.codes.sum(dim=1).mean()

    @torch.no_grad()
    def finish_training(self, x: torch.Tensor, k: int, batch_size: int) -> None:
        self.fold_decoder_norms()

    @torch.no_grad()
    def fold_decoder_norms(self) -> None:
        """Move ‖d_i‖ into the encoder: same codes and x̂, unit-norm columns."""
        norms = self.column_norms()
        self.w_enc *= norms[:, None]
        self.b_enc *= norms
        self.w_dec /= norms
