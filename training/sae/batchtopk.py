"""BatchTopK SAE (Bussmann, Leask & Nanda 2024, "BatchTopK Sparse Autoencoders").

In training f keeps the k·B largest ReLU activations of the whole batch of B rows (k per row
on average); the loss is TopK's, ‖x' − x̂'‖² / E‖x' − x̄'‖² + α·AuxK. At inference (`encode(x)`
without k) f = JumpReLU_θ(a) = a·[a > θ], θ the mean over training batches of the smallest
activation BatchTopK keeps, measured with the final weights (`finish_training`).
"""

from __future__ import annotations

import numpy as np
import torch

from training.sae.base import SparseAutoencoder, batch_top_k, per_sample_top_k


class BatchTopKSae(SparseAutoencoder):
    kind = "batchtopk"

    def sparsify(self, acts: torch.Tensor, k: int) -> torch.Tensor:
        return batch_top_k(acts, k)

    def inference_codes(self, acts: torch.Tensor) -> torch.Tensor:
        """JumpReLU at θ; per-sample top-k at the model's k while θ is not estimated."""
        if self.threshold < 0:
            return per_sample_top_k(acts, self.k)
        return acts * (acts > self.threshold)

    @torch.no_grad()
    def finish_training(self, x: torch.Tensor, k: int, batch_size: int) -> None:
        self.calibrate_threshold(x, k, batch_size)

    @torch.no_grad()
    def calibrate_threshold(self, x: torch.Tensor, k: int, batch_size: int) -> float:
        """θ = mean over batches of the smallest activation BatchTopK keeps."""
        smallest = []
        for start in range(0, len(x), batch_size):
            codes = batch_top_k(self.activations(x[start : start + batch_size]), k)
            kept = codes[codes > 0]
            if kept.numel():
                smallest.append(float(kept.min()))
        self.threshold.fill_(float(np.mean(smallest)) if smallest else 0.0)
        return float(self.threshold)
