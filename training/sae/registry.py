"""The SAE variants by the names users type (CLI flags, config values, saved file names)."""

from __future__ import annotations

from training.sae.base import SparseAutoencoder
from training.sae.batchtopk import BatchTopKSae
from training.sae.matryoshka import MatryoshkaSae
from training.sae.relu import ReluSae
from training.sae.topk import TopKSae

SAE_CLASSES: dict[str, type[SparseAutoencoder]] = {
    cls.kind: cls for cls in (TopKSae, BatchTopKSae, ReluSae, MatryoshkaSae)
}
SAE_KINDS = tuple(SAE_CLASSES)


def sae_class(kind: str) -> type[SparseAutoencoder]:
    """The class of variant `kind`; ValueError naming the known ones otherwise."""
    if kind not in SAE_CLASSES:
        raise ValueError(f"unknown SAE kind {kind!r}; expected one of {SAE_KINDS}")
    return SAE_CLASSES[kind]


def make_sae(kind: str, dim: int, n_latents: int, k: int = 32, seed: int = 0) -> SparseAutoencoder:
    """A fresh SAE of variant `kind` (seeded init)."""
    return sae_class(kind)(dim, n_latents, k=k, seed=seed)
