"""Adapter baselines for GraSP-VL: trained maps that are *not* rotations.

- `mrl`: a free linear map W (initialised at I) trained Matryoshka-style: InfoNCE of anchor
  against caption at every prefix of the contract (nested prefix losses, one target).
- `mlp`: a residual MLP x + f(x) trained with the GraSP-VL loss minus full-space preservation:
  it may buy selectivity with drift, which the eval's drift column shows.

Both are fitted on the train split by the same seeded loop and returned as numpy transforms
that `evaluate` scores like any artifact.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from training.core.errors import InputError
from training.core.granularity import Contract, Granularity
from training.core.seeding import seeded
from training.grasp.config import GraspConfig
from training.grasp.data import GraspSet
from training.grasp.losses import info_nce
from training.grasp.objective import loss_terms, weighted_total

ADAPTERS = ("mrl", "mlp")
Transform = Callable[[np.ndarray], np.ndarray]


class ResidualMLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.net(x)


def fit_adapter(
    kind: str, train: GraspSet, contract: Contract, config: GraspConfig, epochs: int = 10
) -> Transform:
    """Train adapter `kind` on `train` and return it as a numpy transform."""
    if kind not in ADAPTERS:
        raise InputError(f"unknown adapter {kind!r}; choose from {', '.join(ADAPTERS)}")
    with seeded(config.seed):
        dim = train.anchors.shape[1]
        if kind == "mrl":
            model: nn.Module = nn.Linear(dim, dim, bias=False)
            nn.init.eye_(model.weight)
        else:
            model = ResidualMLP(dim, hidden=dim)
        data = train.tensors()
        no_preservation = config.model_copy(
            update={"weights": config.weights.model_copy(update={"preservation": 0.0})}
        )
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        lengths = sorted(set(contract.values()))
        for epoch in range(epochs):
            order = torch.randperm(
                len(train), generator=torch.Generator().manual_seed(config.seed + epoch)
            )
            for start in range(0, len(train) - config.batch_size + 1, config.batch_size):
                batch = {k: v[order[start : start + config.batch_size]] for k, v in data.items()}
                if kind == "mrl":
                    anchors = model(batch["anchors"])
                    captions = model(batch[f"view_{Granularity.CAPTION.value}"])
                    loss = torch.stack(
                        [info_nce(anchors, captions, n, config.temperature) for n in lengths]
                    ).mean()
                else:
                    terms = loss_terms(model, batch, contract, no_preservation)
                    loss = weighted_total(terms, no_preservation)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    model.eval()

    def transform(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(torch.as_tensor(np.asarray(x, dtype=np.float32))).numpy()

    return transform
