"""The crosscoder baseline (Lindsey et al. 2024, "Sparse crosscoders"): one code from both domains.

    f   = TopK_k(ReLU(Σ_d W_enc,d (s_d x_d − b_dec,d) + b))
    x̂_d = D_d(f) = (W_dec,d f + b_dec,d) / s_d                   for each domain d
    L   = ‖x_i − x̂_i‖² / Var(x_i) + ‖x_j − x̂_j‖² / Var(x_j)      on the pairs

The two halves are TopK SAEs (their encoders' pre-activations, their decoders, scales and
unit-norm constraint); the shared encoder bias b is domain i's b_enc (domain j's stays 0). With
one domain missing its term is left out: the one-sided code used for translation and
per-domain concepts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from training.core.seeding import seeded
from training.cosae.config import CosaeConfig
from training.cosae.losses import reconstruction_loss
from training.cosae.objective import DomainScale, prepare_half
from training.loop import Schedule, run_loop
from training.sae.base import constrained_step, per_sample_top_k
from training.sae.topk import TopKSae


class Crosscoder(torch.nn.Module):
    """Two TopK halves sharing one code f (see the module's formula)."""

    def __init__(self, dim_i: int, dim_j: int, n_concepts: int, k: int, seed: int = 0) -> None:
        super().__init__()
        self.domain_i = TopKSae(dim_i, n_concepts, k=k, seed=seed)
        self.domain_j = TopKSae(dim_j, n_concepts, k=k, seed=seed + 1)
        self.domain_j.b_enc.requires_grad_(False)
        self.k = k

    def encode(self, x_i: torch.Tensor | None, x_j: torch.Tensor | None) -> torch.Tensor:
        """The shared TopK code from whichever domains are given."""
        if x_i is None and x_j is None:
            raise ValueError("the crosscoder needs rows of at least one domain")
        pre = self.domain_i.b_enc
        for half, x in ((self.domain_i, x_i), (self.domain_j, x_j)):
            if x is not None:
                pre = pre + half.pre_activations(x)
        return per_sample_top_k(torch.relu(pre), self.k)

    def decode(self, codes: torch.Tensor, domain: str) -> torch.Tensor:
        return (self.domain_i if domain == "i" else self.domain_j).decode(codes)


@dataclass
class CrosscoderResult:
    model: Crosscoder
    seconds: float


class CrosscoderTrainer:
    """The crosscoder's step for `run_loop`: one round of `config.steps` paired batches."""

    label = "crosscoder"

    def __init__(
        self,
        model: Crosscoder,
        data: tuple[torch.Tensor, torch.Tensor],
        scales: tuple[DomainScale, DomainScale],
        config: CosaeConfig,
    ) -> None:
        self.model, self.data, self.scales, self.config = model, data, scales, config
        parameters = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(parameters, lr=config.learning_rate)
        self.generator = torch.Generator().manual_seed(config.seed)

    def begin_round(self, index: int) -> None:
        pass

    def step(self, step: int) -> dict[str, float]:
        data_i, data_j = self.data
        size = self.config.paired_batch_size
        rows = torch.randint(len(data_i), (size,), generator=self.generator).to(data_i.device)
        x_i, x_j = data_i[rows], data_j[rows]
        codes = self.model.encode(x_i, x_j)
        loss = reconstruction_loss(
            x_i, self.model.decode(codes, "i"), self.scales[0].variance
        ) + reconstruction_loss(x_j, self.model.decode(codes, "j"), self.scales[1].variance)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        constrained_step(self.optimizer, (self.model.domain_i, self.model.domain_j))
        return {"loss": float(loss.detach())}

    def end_round(self, index: int, step: int, means: dict[str, float]) -> dict[str, float]:
        return {"step": step, **means}

    def initial_record(self) -> None:
        return None

    def snapshot(self) -> None:
        return None

    def checkpoint_state(self) -> dict[str, Any]:
        raise NotImplementedError("the crosscoder baseline is not checkpointed")

    def load_checkpoint_state(self, saved: dict[str, Any]) -> None:
        raise NotImplementedError("the crosscoder baseline is not checkpointed")


def train_crosscoder(
    pair_i: np.ndarray,
    pair_j: np.ndarray,
    config: CosaeConfig,
    reference: tuple[np.ndarray, np.ndarray] | None = None,
    device: str = "cpu",
) -> CrosscoderResult:
    """Train on the pairs: L = L_rec,i(D_i(f)) + L_rec,j(D_j(f)), f the joint code.

    M = `config.n_concepts`, k = max(k_i, k_j), `config.steps` Adam steps on paired batches of
    `config.paired_batch_size` drawn with replacement. Means and scales from `reference` (all
    training rows of each domain; default the pairs).
    """
    with seeded(config.seed):
        rows_i = np.ascontiguousarray(pair_i, dtype=np.float32)
        rows_j = np.ascontiguousarray(pair_j, dtype=np.float32)
        if len(rows_i) != len(rows_j) or len(rows_i) == 0:
            raise ValueError("the crosscoder needs row-aligned, non-empty pairs")
        model = Crosscoder(
            rows_i.shape[1],
            rows_j.shape[1],
            config.n_concepts,
            max(config.k_i, config.k_j),
            config.seed,
        )
        stats_i, stats_j = reference if reference is not None else (rows_i, rows_j)
        scale_i = prepare_half(model.domain_i, torch.as_tensor(np.asarray(stats_i, np.float32)))
        scale_j = prepare_half(model.domain_j, torch.as_tensor(np.asarray(stats_j, np.float32)))
        model.to(device)
        data = (torch.as_tensor(rows_i, device=device), torch.as_tensor(rows_j, device=device))
        trainer = CrosscoderTrainer(model, data, (scale_i, scale_j), config)
        result = run_loop(trainer, Schedule(config.steps, config.steps), progress=False)
    model.eval()
    return CrosscoderResult(model, result.state.seconds)
