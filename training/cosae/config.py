"""CoSAE's config: the weight of each loss term, and the run (`CosaeConfig`)."""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import Field, model_validator

from training.core.config import ConfigModel
from training.sae.base import AUX_COEFFICIENT

DISTRIBUTION_KINDS = ("energy", "sorted", "sliced")
Distribution = Literal["energy", "sorted", "sliced"]


class LossWeights(ConfigModel):
    """The weight of each term; 0 switches the term off (not computed, no gradient)."""

    reconstruction: float = Field(1.0, ge=0)
    translation: float = Field(1.0, ge=0)
    consistency: float = Field(0.1, ge=0)
    distribution: float = Field(0.5, ge=0)
    cycle: float = Field(0.0, ge=0)
    aux: float = Field(AUX_COEFFICIENT, ge=0, description="AuxK of each domain (dead concepts)")

    def active(self) -> dict[str, float]:
        """The terms that are on, with their weights."""
        return {name: value for name, value in self.model_dump().items() if value > 0}


class CosaeConfig(ConfigModel):
    n_concepts: int = Field(2048, ge=1, description="M: the shared concept dictionary size")
    k_i: int = Field(32, ge=1, description="active concepts per row of domain i (TopK)")
    k_j: int = Field(32, ge=1, description="active concepts per row of domain j (TopK)")
    weights: LossWeights = Field(default_factory=LossWeights)
    distribution: Distribution = "sliced"
    projections: int = Field(64, ge=1, description="directions per step, sliced Wasserstein")
    paired_fraction: float = Field(
        0.01, gt=0, le=1, description="share of the training rows whose pair is known"
    )
    steps: int = Field(4000, ge=1)
    batch_size: int = Field(512, ge=2, description="unpaired rows per domain per step")
    paired_batch_size: int = Field(256, ge=1, description="pairs per step (with replacement)")
    learning_rate: float = Field(1e-3, gt=0)
    log_every: int = Field(500, ge=1, description="steps between validation and checkpoint")
    seed: int = 0

    @model_validator(mode="after")
    def _k_within_concepts(self) -> CosaeConfig:
        for name in ("k_i", "k_j"):
            if getattr(self, name) > self.n_concepts:
                raise ValueError(
                    f"{name} = {getattr(self, name)} exceeds n_concepts = {self.n_concepts}"
                )
        return self

    def fingerprint(self) -> str:
        """Identifies a run for resuming; `steps` and `log_every` are left out, so a finished
        run can be continued for more steps from its checkpoint."""
        payload = self.model_dump_json(exclude={"steps", "log_every"})
        return hashlib.sha256(payload.encode()).hexdigest()[:16]
