"""Every CoSAE method behind one interface (`CoupledMethod`) and the one code that scores it.

A method offers translation, and where it has them reconstruction and concept codes;
`score_method` computes every metric of `training.cosae.metrics` from what it offers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from training.cosae.baselines import LinearMap
from training.cosae.crosscoder import Crosscoder
from training.cosae.metrics import (
    concept_consistency,
    cycle_fvu,
    extraction_fvu,
    mean_cosine,
    recall_at_1,
    shared_factor_recovery,
    translation_fvu,
)
from training.cosae.model import CoupledSae, encode_rows, reconstruct_rows, translate_rows
from training.cosae.report import COLUMNS


@dataclass
class CoupledMethod:
    """What every method offers the metric code; None where a method has no such thing.

    `reconstruct(x_i, x_j)` → (x̂_i, x̂_j) of the held-out pairs (a crosscoder uses both sides);
    `translate(x, source)` → rows in the other domain; `encode(x, domain)` → concept codes.
    """

    name: str
    translate: Callable[[np.ndarray, str], np.ndarray]
    reconstruct: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
    encode: Callable[[np.ndarray, str], np.ndarray] | None = None
    seconds: float | None = None


def coupled_sae_method(name: str, model: CoupledSae, seconds: float | None) -> CoupledMethod:
    """CoSAE, the universal SAE and the (matched or not) uncoupled SAEs."""
    return CoupledMethod(
        name=name,
        translate=lambda x, source: translate_rows(model, x, source),
        reconstruct=lambda x_i, x_j: (
            reconstruct_rows(model, x_i, "i"),
            reconstruct_rows(model, x_j, "j"),
        ),
        encode=lambda x, domain: encode_rows(model, x, domain),
        seconds=seconds,
    )


def linear_method(name: str, linear: LinearMap, seconds: float | None) -> CoupledMethod:
    """A linear map: translation only (no concepts, no reconstruction)."""
    return CoupledMethod(name=name, translate=linear.translate, seconds=seconds)


def crosscoder_method(name: str, model: Crosscoder, seconds: float | None) -> CoupledMethod:
    """Joint codes for reconstruction; one-sided codes for translation and concepts."""

    @torch.no_grad()
    def codes(x_i: np.ndarray | None, x_j: np.ndarray | None) -> torch.Tensor:
        def tensor(x: np.ndarray | None) -> torch.Tensor | None:
            return None if x is None else torch.as_tensor(np.asarray(x, np.float32))

        return model.encode(tensor(x_i), tensor(x_j))

    @torch.no_grad()
    def reconstruct(x_i: np.ndarray, x_j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        joint = codes(x_i, x_j)
        return model.decode(joint, "i").numpy(), model.decode(joint, "j").numpy()

    @torch.no_grad()
    def translate(x: np.ndarray, source: str) -> np.ndarray:
        one_sided = codes(x, None) if source == "i" else codes(None, x)
        return model.decode(one_sided, "j" if source == "i" else "i").numpy()

    def encode(x: np.ndarray, domain: str) -> np.ndarray:
        return (codes(x, None) if domain == "i" else codes(None, x)).numpy()

    return CoupledMethod(name, translate, reconstruct, encode, seconds)


def score_method(
    method: CoupledMethod,
    x_i: np.ndarray,
    x_j: np.ndarray,
    shared_factors: np.ndarray | None = None,
) -> dict[str, float | int | None]:
    """Every metric of `training.cosae.metrics` for one method on held-out pairs (x_i, x_j)."""
    to_j, to_i = method.translate(x_i, "i"), method.translate(x_j, "j")
    scores: dict[str, float | int | None] = dict.fromkeys(COLUMNS)
    scores.update(
        translation_fvu_ij=translation_fvu(x_j, to_j),
        translation_fvu_ji=translation_fvu(x_i, to_i),
        cosine_ij=mean_cosine(x_j, to_j),
        cosine_ji=mean_cosine(x_i, to_i),
        r1_ij=recall_at_1(to_j, x_j),
        r1_ji=recall_at_1(to_i, x_i),
        cycle_fvu_i=cycle_fvu(x_i, method.translate(to_j, "j")),
        cycle_fvu_j=cycle_fvu(x_j, method.translate(to_i, "i")),
        seconds=method.seconds,
    )
    if method.reconstruct is not None:
        recon_i, recon_j = method.reconstruct(x_i, x_j)
        scores.update(fvu_i=extraction_fvu(x_i, recon_i), fvu_j=extraction_fvu(x_j, recon_j))
    if method.encode is not None:
        codes_i, codes_j = method.encode(x_i, "i"), method.encode(x_j, "j")
        scores.update(concept_consistency(codes_i, codes_j))
        if shared_factors is not None:
            scores["recovery"] = shared_factor_recovery(codes_i, codes_j, shared_factors)
    # NaN (no live concept, only empty active sets) becomes None: undefined, and valid JSON
    return {
        name: None if isinstance(value, float) and math.isnan(value) else value
        for name, value in scores.items()
    }
