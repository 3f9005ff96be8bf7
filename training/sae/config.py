"""How one SAE baseline is trained (`SaeConfig`)."""

from __future__ import annotations

import math

from pydantic import model_validator

from training.core.config import ConfigModel
from training.sae.registry import SAE_KINDS


class SaeConfig(ConfigModel):
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

    @model_validator(mode="after")
    def _checked(self) -> SaeConfig:
        if self.kind not in SAE_KINDS:
            raise ValueError(f"unknown SAE kind {self.kind!r}; expected one of {SAE_KINDS}")
        positive = ("expansion", "k", "batch_size", "epochs", "patience")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.k_range is not None and not 1 <= self.k_range[0] <= self.k_range[1]:
            raise ValueError(f"k_range must be integers 1 <= lo <= hi, got {self.k_range!r}")
        if not (math.isfinite(self.l1) and self.l1 >= 0):
            raise ValueError(f"l1 must be finite and >= 0, got {self.l1!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be finite and > 0, got {self.lr!r}")
        return self

    def largest_k(self) -> int:
        """The largest k training or validation will ask for."""
        return max(self.k, self.k_range[1]) if self.k_range else self.k
