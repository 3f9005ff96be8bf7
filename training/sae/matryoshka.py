"""Matryoshka SAE (Bussmann et al. 2025, "Learning Multi-Level Features with Matryoshka Sparse
Autoencoders"; Nabeshima 2024, "Matryoshka Sparse Autoencoders").

BatchTopK codes; the loss sums the normalised MSE of the reconstructions from the first m
latents, m ∈ {M/16, M/8, M/4, M/2, M}, so early latents must reconstruct on their own:

    L = Σ_m ‖x' − (W_dec[:, :m] f[:m] + b_dec)‖² / E‖x' − x̄'‖² + α·AuxK
"""

from __future__ import annotations

from training.sae.batchtopk import BatchTopKSae


def matryoshka_prefixes(n_latents: int) -> tuple[int, ...]:
    """Nested dictionary sizes M/16, M/8, M/4, M/2, M (rounded down, at least 1, distinct)."""
    return tuple(sorted({max(1, n_latents // 2**j) for j in (4, 3, 2, 1, 0)}))


class MatryoshkaSae(BatchTopKSae):
    kind = "matryoshka"

    @staticmethod
    def nested_sizes(n_latents: int) -> tuple[int, ...]:
        return matryoshka_prefixes(n_latents)
