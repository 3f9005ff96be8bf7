"""Baselines for CoSAE, fitted on the same split and pairs and scored by the same metric code.

- **orthogonal Procrustes**: centred rows, the partial isometry W = U Vᵀ from the SVD of the
  paired cross-covariance (rectangular when D_i ≠ D_j: the same as zero-padding the smaller
  domain), with its least-squares scale;
- **least squares**: the minimum-norm (or ridge) linear map fitted on the centred pairs, each
  direction separately;
- **crosscoder** (`training.cosae.crosscoder`): one code from the sum of both domains' encoders,
  a decoder per domain, trained on the pairs (Lindsey et al. 2024, "Sparse crosscoders");
- **universal SAE** (Thasarathan et al. 2025): encode with one domain's encoder, decode with
  every decoder, trained on the pairs: the coupled model with only reconstruction and
  translation on, and the paired rows as its only data;
- **uncoupled SAEs, matched**: two TopK SAEs trained apart (the coupled model with only
  reconstruction on), their concepts matched afterwards by the Hungarian algorithm on the
  activation correlations over the pairs.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from training.cosae.config import CosaeConfig, LossWeights
from training.cosae.metrics import cross_correlations
from training.cosae.model import DOMAINS, CoupledSae
from training.cosae.train import CoupledResult, train_coupled

log = logging.getLogger(__name__)


# --- linear maps -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinearMap:
    """x_j ≈ (x_i − μ_i) W_ij + μ_j and x_i ≈ (x_j − μ_j) W_ji + μ_i."""

    mean_i: np.ndarray  # [D_i]
    mean_j: np.ndarray  # [D_j]
    i_to_j: np.ndarray  # [D_i, D_j]
    j_to_i: np.ndarray  # [D_j, D_i]

    def translate(self, x: np.ndarray, source: str) -> np.ndarray:
        """Rows of `source` mapped into the other domain (float32)."""
        if source not in DOMAINS:
            raise ValueError(f"source must be one of {DOMAINS}, got {source!r}")
        rows = np.asarray(x, dtype=np.float64)
        if source == "i":
            out = (rows - self.mean_i) @ self.i_to_j + self.mean_j
        else:
            out = (rows - self.mean_j) @ self.j_to_i + self.mean_i
        return out.astype(np.float32)


def orthogonal_procrustes(
    pair_i: np.ndarray,
    pair_j: np.ndarray,
    mean_i: np.ndarray | None = None,
    mean_j: np.ndarray | None = None,
    scaled: bool = True,
) -> LinearMap:
    """argmin_W ‖A_i W − A_j‖_F over partial isometries W [D_i, D_j], A_d = pairs − μ_d.

    With A_iᵀA_j = U Σ Vᵀ (thin SVD), W = U Vᵀ: orthogonal when D_i = D_j, orthonormal rows or
    columns otherwise (the square solution after zero-padding the smaller domain). j → i uses
    Wᵀ. With `scaled`, each direction also gets the least-squares scale tr Σ / ‖A_source‖²_F
    (the two models' embeddings need not have one norm). μ_d defaults to the pairs' own means;
    pass the means of all (unpaired) training rows when the pairs are few.
    """
    a_i, a_j, mu_i, mu_j = _centred_pairs(pair_i, pair_j, mean_i, mean_j)
    u, sigma, vt = np.linalg.svd(a_i.T @ a_j, full_matrices=False)
    w = u @ vt
    scale_ij = scale_ji = 1.0
    if scaled:
        scale_ij = float(sigma.sum() / max(np.square(a_i).sum(), 1e-12))
        scale_ji = float(sigma.sum() / max(np.square(a_j).sum(), 1e-12))
    return LinearMap(mu_i, mu_j, w * scale_ij, w.T * scale_ji)


def least_squares_map(
    pair_i: np.ndarray,
    pair_j: np.ndarray,
    mean_i: np.ndarray | None = None,
    mean_j: np.ndarray | None = None,
    ridge: float = 0.0,
) -> LinearMap:
    """W_ij = argmin_W ‖A_i W − A_j‖²_F + λ‖W‖²_F, and W_ji likewise, A_d = pairs − μ_d.

    λ = 0 gives the minimum-norm least-squares solution (np.linalg.lstsq), which is defined
    with fewer pairs than dimensions; λ > 0 the ridge solution (A_iᵀA_i + λI)⁻¹ A_iᵀ A_j.
    """
    if ridge < 0:
        raise ValueError(f"ridge must be >= 0, got {ridge}")
    a_i, a_j, mu_i, mu_j = _centred_pairs(pair_i, pair_j, mean_i, mean_j)

    def fit(source: np.ndarray, target: np.ndarray) -> np.ndarray:
        if ridge == 0:
            return np.linalg.lstsq(source, target, rcond=None)[0]
        gram = source.T @ source + ridge * np.eye(source.shape[1])
        return np.linalg.solve(gram, source.T @ target)

    return LinearMap(mu_i, mu_j, fit(a_i, a_j), fit(a_j, a_i))


def _centred_pairs(
    pair_i: np.ndarray, pair_j: np.ndarray, mean_i: np.ndarray | None, mean_j: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    p_i, p_j = np.asarray(pair_i, dtype=np.float64), np.asarray(pair_j, dtype=np.float64)
    if p_i.ndim != 2 or p_j.ndim != 2 or len(p_i) != len(p_j) or len(p_i) == 0:
        raise ValueError(f"need row-aligned non-empty pairs, got {p_i.shape} and {p_j.shape}")
    mu_i = p_i.mean(axis=0) if mean_i is None else np.asarray(mean_i, dtype=np.float64)
    mu_j = p_j.mean(axis=0) if mean_j is None else np.asarray(mean_j, dtype=np.float64)
    return p_i - mu_i, p_j - mu_j, mu_i, mu_j


# --- universal SAE and uncoupled SAEs -----------------------------------------------------------


def with_terms_on(config: CosaeConfig, *terms: str) -> CosaeConfig:
    """The coupled config with only `terms` on (weight 1) and its AuxK weight kept."""
    weights = {name: float(name in terms) for name in LossWeights.model_fields if name != "aux"}
    return config.model_copy(update={"weights": LossWeights(**weights, aux=config.weights.aux)})


def universal_sae_config(config: CosaeConfig) -> CosaeConfig:
    """The coupled config with only reconstruction, translation (and AuxK) on."""
    return with_terms_on(config, "reconstruction", "translation")


def uncoupled_config(config: CosaeConfig) -> CosaeConfig:
    """The coupled config with only reconstruction (and AuxK) on: two independent SAEs."""
    return with_terms_on(config, "reconstruction")


def train_universal_sae(
    pair_i: np.ndarray,
    pair_j: np.ndarray,
    config: CosaeConfig,
    reference: tuple[np.ndarray, np.ndarray] | None = None,
    device: str = "cpu",
    work_dir: Path | None = None,
) -> CoupledResult:
    """Universal SAE on the pairs: each domain's code decoded by both decoders.

    Thasarathan et al. draw one source domain per batch; here every step uses both sources,
    which is the same objective in expectation: L_rec,i + L_rec,j + L_tr,i→j + L_tr,j→i.
    """
    pairs = np.repeat(np.arange(len(pair_i))[:, None], 2, axis=1)
    return train_coupled(
        pair_i,
        pair_j,
        pairs,
        universal_sae_config(config),
        reference=reference,
        work_dir=work_dir,
        device=device,
    )


def train_uncoupled(
    x_i: np.ndarray,
    x_j: np.ndarray,
    config: CosaeConfig,
    device: str = "cpu",
    work_dir: Path | None = None,
) -> CoupledResult:
    """Two TopK SAEs, one per domain, trained on all their rows with nothing tying them."""
    return train_coupled(x_i, x_j, None, uncoupled_config(config), work_dir=work_dir, device=device)


def match_concepts(codes_i: np.ndarray, codes_j: np.ndarray) -> np.ndarray:
    """order [M]: concept c of domain i is matched with concept order[c] of domain j.

    Maximises Σ_c corr(f_i,c, f_j,order[c]) over the paired rows (Hungarian algorithm,
    scipy.optimize.linear_sum_assignment on the M × M correlation matrix; constant concepts
    correlate 0).
    """
    if np.shape(codes_i) != np.shape(codes_j):
        shapes = f"{np.shape(codes_i)} and {np.shape(codes_j)}"
        raise ValueError(f"codes {shapes} must be row-aligned over one index")
    rows, order = linear_sum_assignment(cross_correlations(codes_i, codes_j), maximize=True)
    return order[np.argsort(rows)]


def with_domain_j_reordered(model: CoupledSae, order: np.ndarray) -> CoupledSae:
    """A copy whose domain-j concept c is the original concept order[c] (same maps otherwise)."""
    permuted = copy.deepcopy(model)
    index = torch.as_tensor(np.asarray(order), dtype=torch.long)
    half = permuted.domain_j
    with torch.no_grad():
        half.w_enc.copy_(half.w_enc[index])
        half.b_enc.copy_(half.b_enc[index])
        half.w_dec.copy_(half.w_dec[:, index])
    return permuted
