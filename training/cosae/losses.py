"""CoSAE's loss terms, one pure function each, on torch tensors (differentiable).

Notation: x_i [N, D_i] and x_j [N, D_j] are rows of the two domains; E_d is domain d's encoder
(TopK codes f_d = E_d(x_d) ∈ R^M_{≥0}, M concepts shared by both domains), D_d its decoder.
`variance` is E‖x − x̄‖² of the domain's training rows, so every reconstruction-type term is a
normalised MSE (1 = as bad as predicting the mean) and the terms of the two domains are on one
scale whatever their dimensions and norms. The distributional terms are divided by the size of
the codes they compare, so they cannot be lowered by shrinking the codes, and lie in [0, 2].
"""

from __future__ import annotations

import torch

EPS = 1e-12


def normalised_mse(target: torch.Tensor, estimate: torch.Tensor, variance: float) -> torch.Tensor:
    """(1/N) Σ_n ‖t_n − e_n‖² / variance: the batch's FVU against the training variance."""
    if target.shape != estimate.shape:
        raise ValueError(f"target {tuple(target.shape)} and estimate {tuple(estimate.shape)}")
    if not variance > 0:
        raise ValueError(f"variance must be > 0, got {variance}")
    return (target - estimate).square().sum(dim=1).mean() / variance


def reconstruction_loss(x: torch.Tensor, x_hat: torch.Tensor, variance: float) -> torch.Tensor:
    """L_rec,d = (1/N) Σ_n ‖x_d,n − D_d(E_d(x_d,n))‖² / Var(x_d), per domain, on all its rows."""
    return normalised_mse(x, x_hat, variance)


def translation_loss(
    x_j: torch.Tensor, x_j_from_i: torch.Tensor, variance_j: float
) -> torch.Tensor:
    """L_tr,i→j = (1/P) Σ_p ‖x_j,p − D_j(E_i(x_i,p))‖² / Var(x_j), on the P paired rows.

    One direction; the objective adds both (i→j and j→i). 0 for a perfect translator.
    """
    return normalised_mse(x_j, x_j_from_i, variance_j)


def concept_consistency_loss(codes_i: torch.Tensor, codes_j: torch.Tensor) -> torch.Tensor:
    """L_cc = Σ_p ‖a_i,p − a_j,p‖² / Σ_p ½(‖a_i,p‖² + ‖a_j,p‖²), on the paired rows.

    a_d are the (non-negative) concept activations of the two items of a pair. 0 when every pair
    activates the same concepts as strongly in both domains; at most 2 (disjoint concepts).
    Scale-free: shrinking every activation does not lower it.
    """
    _same_concepts(codes_i, codes_j)
    if codes_i.shape[0] != codes_j.shape[0]:
        raise ValueError(f"paired codes differ in rows: {codes_i.shape[0]} and {codes_j.shape[0]}")
    difference = (codes_i - codes_j).square().sum()
    size = 0.5 * (codes_i.square().sum() + codes_j.square().sum())
    return difference / (size + EPS)


def energy_alignment_loss(codes_i: torch.Tensor, codes_j: torch.Tensor) -> torch.Tensor:
    """Per-concept energy matching: Σ_c (√e_i,c − √e_j,c)² / Σ_c ½(e_i,c + e_j,c).

    e_d,c = (1/N_d) Σ_n f_d,n,c² is concept c's mean energy on domain d's (unpaired) rows. The
    cheapest distributional term: it matches one moment per concept (how often and how strongly
    each concept fires), not the shape of its distribution. Rows of the two domains need not
    correspond, and their numbers may differ.
    """
    _same_concepts(codes_i, codes_j)
    energy_i, energy_j = codes_i.square().mean(dim=0), codes_j.square().mean(dim=0)
    mismatch = ((energy_i + EPS).sqrt() - (energy_j + EPS).sqrt()).square().sum()
    return mismatch / (0.5 * (energy_i.sum() + energy_j.sum()) + EPS)


def wasserstein_1d(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact W₁ between the empirical distributions of each column of a [N, C] and b [M, C].

    W₁ = ∫ |F_a(t) − F_b(t)| dt = Σ_k |F_a(t_k) − F_b(t_k)| (t_{k+1} − t_k) over the sorted
    union t of both samples (the formula of scipy.stats.wasserstein_distance, per column).
    N and M may differ. Differentiable in the values through the sorted gaps. Returns [C].
    """
    _same_concepts(a, b)
    if a.shape[0] == 0 or b.shape[0] == 0:
        raise ValueError("both samples need at least one row")
    sorted_a = a.sort(dim=0).values.T.contiguous()  # [C, N]
    sorted_b = b.sort(dim=0).values.T.contiguous()  # [C, M]
    union = torch.cat([sorted_a, sorted_b], dim=1).sort(dim=1).values  # [C, N + M]
    gaps = union[:, 1:] - union[:, :-1]
    points = union[:, :-1].detach().contiguous()
    cdf_a = torch.searchsorted(sorted_a.detach(), points, right=True).to(gaps.dtype) / a.shape[0]
    cdf_b = torch.searchsorted(sorted_b.detach(), points, right=True).to(gaps.dtype) / b.shape[0]
    return ((cdf_a - cdf_b).abs() * gaps).sum(dim=1)


def sorted_wasserstein_loss(codes_i: torch.Tensor, codes_j: torch.Tensor) -> torch.Tensor:
    """Per-concept 1-D Wasserstein: Σ_c W₁(f_i,c, f_j,c) / Σ_c ½(E|f_i,c| + E|f_j,c|).

    W₁ of each concept's activations over domain i's rows against domain j's rows (sorted,
    `wasserstein_1d`): matches the whole distribution of every concept, not one moment.
    """
    per_concept = wasserstein_1d(codes_i, codes_j)
    size = 0.5 * (codes_i.abs().mean(dim=0).sum() + codes_j.abs().mean(dim=0).sum())
    return per_concept.sum() / (size + EPS)


def sliced_wasserstein_loss(
    codes_i: torch.Tensor, codes_j: torch.Tensor, directions: torch.Tensor
) -> torch.Tensor:
    """Sliced W₁: Σ_p W₁(θ_pᵀf_i, θ_pᵀf_j) / Σ_p ½(E|θ_pᵀf_i| + E|θ_pᵀf_j|).

    `directions` [M, P] holds P unit vectors θ_p of the concept space (draw them afresh each
    step). Compares the joint distributions of the codes, co-activations included, through
    one-dimensional projections; zero in expectation only when the distributions are equal.
    """
    _same_concepts(codes_i, codes_j)
    if directions.ndim != 2 or directions.shape[0] != codes_i.shape[1]:
        raise ValueError(
            f"directions must be [{codes_i.shape[1]}, P], got {tuple(directions.shape)}"
        )
    projected_i, projected_j = codes_i @ directions, codes_j @ directions
    size = 0.5 * (projected_i.abs().mean(dim=0).sum() + projected_j.abs().mean(dim=0).sum())
    return wasserstein_1d(projected_i, projected_j).sum() / (size + EPS)


def random_directions(
    n_concepts: int, n_projections: int, generator: torch.Generator
) -> torch.Tensor:
    """P Gaussian directions of R^M scaled to unit norm, [M, P] (uniform on the sphere)."""
    draws = torch.randn(n_concepts, n_projections, generator=generator)
    return draws / draws.norm(dim=0, keepdim=True).clamp_min(EPS)


def cycle_loss(x_i: torch.Tensor, x_i_cycled: torch.Tensor, variance_i: float) -> torch.Tensor:
    """L_cyc,i = (1/N) Σ_n ‖x_i,n − D_i(E_j(D_j(E_i(x_i,n))))‖² / Var(x_i), on unpaired rows.

    Translate to j and back: needs no pairs. One direction; the objective adds both.
    """
    return normalised_mse(x_i, x_i_cycled, variance_i)


def _same_concepts(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        shapes = f"{tuple(a.shape)} and {tuple(b.shape)}"
        raise ValueError(f"expected [N, M] and [N', M] codes, got {shapes}")
