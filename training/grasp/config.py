"""GraSP-VL's config: the weight of each loss term (`LossWeights`), the run (`GraspConfig`), and
the recipe `strata train grasp --gallery` uses without a config (`GALLERY_RECIPE`)."""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import Field

from training.core.config import ConfigModel

TERMS = ("alignment", "retention", "ranking", "invariance", "preservation")
GALLERY_TERMS = ("retrieval", "distillation")


class LossWeights(ConfigModel):
    """Weight of each term; 0 switches a term off (for ablations)."""

    alignment: float = Field(1.0, ge=0)
    retention: float = Field(0.5, ge=0)
    ranking: float = Field(3.0, ge=0)
    # large: the squared prefix-cosine gaps it penalises are small numbers (~1e-3)
    invariance: float = Field(3000.0, ge=0)
    preservation: float = Field(1.0, ge=0)
    # gallery fitting (train_grasp with a GalleryFit; ignored without one)
    retrieval: float = Field(1.0, ge=0)
    distillation: float = Field(1.0, ge=0)


class GraspConfig(ConfigModel):
    epochs: int = Field(30, gt=0)
    batch_size: int = Field(256, gt=1)
    learning_rate: float = Field(1e-2, gt=0)
    temperature: float = Field(0.05, gt=0)
    margin: float = Field(0.1, ge=0)
    patience: int = Field(5, ge=1, description="epochs without validation gain before stopping")
    seed: int = 0
    train_split: str = "train"
    validation_split: str = "val"
    weights: LossWeights = LossWeights()
    # alignment in both directions (anchor -> view and view -> anchor); see alignment_loss
    symmetric_alignment: bool = False
    contract: dict[str, int] | None = None
    max_rows: int | None = Field(
        None, gt=0, description="train on a sample of this many rows (drawn from the seed)"
    )
    # gallery fitting: where R starts (R = Cayley(A)·R₀) and the batches of the two terms
    init: Literal["identity", "gallery-pca"] = "gallery-pca"
    # of both gallery terms; 0.05 against 0.1 on Flickr8k dev (the gallery ablation's validation)
    retrieval_temperature: float = Field(0.05, gt=0)
    queries_per_step: int = Field(128, gt=0)
    rows_per_step: int = Field(2048, gt=1)
    distillation_queries: list[Literal["vocabulary", "training"]] = Field(
        default_factory=lambda: ["vocabulary", "training"]
    )

    def fingerprint(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


# What `strata train grasp --gallery` and the demo train with when no config is given (chosen on
# Flickr8k dev, docs/how-to/train-grasp.md#fit-the-gallery): no view alignment or retention
# (they pull the object prefix towards the views and cost gallery retrieval), gentler steps, and
# the ranking term at 15 (dev selectivity 0.844 against 0.827 at 3, the same dev retrieval AP).
GALLERY_RECIPE = GraspConfig(
    learning_rate=3e-3,
    epochs=20,
    patience=4,
    weights=LossWeights(alignment=0, retention=0, ranking=15),
)
