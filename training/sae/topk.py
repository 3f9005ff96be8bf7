"""TopK SAE (Gao et al. 2024, "Scaling and evaluating sparse autoencoders").

f = TopK_k(ReLU(W_enc(x' − b_dec) + b_enc))      (the k largest activations of each row)
L = ‖x' − x̂'‖² / E‖x' − x̄'‖² + α·AuxK            (normalised MSE; unit-norm decoder columns)
"""

from __future__ import annotations

import torch

from training.sae.base import SparseAutoencoder, per_sample_top_k


class TopKSae(SparseAutoencoder):
    kind = "topk"

    def sparsify(self, acts: torch.Tensor, k: int) -> torch.Tensor:
        return per_sample_top_k(acts, k)

    def inference_codes(self, acts: torch.Tensor) -> torch.Tensor:
        return per_sample_top_k(acts, self.k)
