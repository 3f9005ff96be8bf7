"""Orthogonal maps from unconstrained parameters, and their checks. Pure functions on tensors.

Both transforms of Strata are rotations of the embedding space, so full-length cosine is kept
exactly: GraSP-VL uses the Cayley map, CEDAR the matrix exponential of a skew-symmetric matrix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def skew_from_upper(upper: torch.Tensor, dim: int) -> torch.Tensor:
    """A = U - Uᵀ, where U holds `upper` (dim·(dim-1)/2 values) in its strict upper triangle."""
    import torch  # here, not at import: numpy users of this module load no torch

    expected = dim * (dim - 1) // 2
    if upper.shape != (expected,):
        raise ValueError(
            f"expected {expected} upper-triangle values for dim {dim}, got {tuple(upper.shape)}"
        )
    rows, cols = torch.triu_indices(dim, dim, offset=1, device=upper.device)
    matrix = torch.zeros(dim, dim, dtype=upper.dtype, device=upper.device)
    matrix = matrix.index_put((rows, cols), upper)
    return matrix - matrix.T


def cayley(upper: torch.Tensor, dim: int) -> torch.Tensor:
    """R = Cayley(A) = (I + A)⁻¹ (I − A), A skew-symmetric from its strict upper triangle.

    Computed as the solution X of (I + A) X = I − A (a linear solve, never an explicit
    inverse). I + A is always invertible for skew-symmetric A (its eigenvalues are 1 + iλ), and
    R is orthogonal with det R = 1. Differentiable in `upper`; A = 0 gives R = I.
    """
    import torch  # here, not at import: numpy users of this module load no torch

    a = skew_from_upper(upper, dim)
    eye = torch.eye(dim, dtype=upper.dtype, device=upper.device)
    return torch.linalg.solve(eye + a, eye - a)


def skew_exponential(upper: torch.Tensor, dim: int) -> torch.Tensor:
    """U = exp(A − Aᵀ) from the strict upper triangle of A (CEDAR's parameterisation)."""
    import torch  # here, not at import: numpy users of this module load no torch

    return torch.linalg.matrix_exp(skew_from_upper(upper, dim))


def reorthogonalise(matrix: np.ndarray) -> np.ndarray:
    """The nearest orthogonal matrix (polar factor U Vᵀ of the SVD), computed in float64."""
    u, _, vt = np.linalg.svd(np.asarray(matrix, dtype=np.float64))
    return u @ vt


def orthogonality_error(matrix: np.ndarray) -> float:
    """max |RᵀR − I|, computed in float64."""
    r = np.asarray(matrix, dtype=np.float64)
    return float(np.abs(r.T @ r - np.eye(r.shape[0])).max())


def pca_rotation(samples: np.ndarray) -> np.ndarray:
    """Rows are the eigenvectors of the second-moment matrix, by decreasing eigenvalue."""
    x = np.asarray(samples, dtype=np.float64)
    eigenvalues, eigenvectors = np.linalg.eigh(x.T @ x / len(x))
    return reorthogonalise(eigenvectors[:, np.argsort(eigenvalues)[::-1]].T)


def random_rotation(dim: int, seed: int = 0) -> np.ndarray:
    """Haar-random orthogonal matrix (QR of a Gaussian matrix with the sign fix)."""
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(dim, dim)))
    return q * np.sign(np.diag(r))


def centred_principal_axes(rows: np.ndarray) -> np.ndarray:
    """R₀ for a gallery: its principal axes with the mean direction moved last.

    The rows' uncentred second moment within the complement of the mean direction m, by
    decreasing eigenvalue, then m itself as the last axis. The mean is what every row shares
    ("a photo of something"); in a short prefix it only compresses cosines, so it goes where it
    costs least. A rotation about the origin: full-length cosine is kept.

    The eigenproblem is solved in coordinates of an orthonormal basis of m's complement, so a
    second moment with several (near-)zero eigenvalues (rows of lower rank than D, as a text
    encoder's often are) still yields D − 1 axes orthogonal to m: picking them out of the
    eigenvectors of the projected moment fails there, since LAPACK may mix m into the null
    space's eigenvectors."""
    x = np.asarray(rows, dtype=np.float64)
    mean = x.mean(axis=0)
    unit = mean / max(float(np.linalg.norm(mean)), 1e-12)
    complement = mean_complement(unit)
    rest = pca_rotation(x @ complement.T) @ complement
    return reorthogonalise(np.concatenate([rest, unit[None]]))


def mean_complement(unit: np.ndarray) -> np.ndarray:
    """[D − 1, D]: orthonormal rows spanning the complement of the unit vector `unit` (the
    Householder QR of [unit | I]: its first column is ±unit, the others span the rest)."""
    q, _ = np.linalg.qr(np.column_stack([unit, np.eye(len(unit))]))
    return q[:, 1:].T


def polar_rows(matrix: np.ndarray) -> np.ndarray:
    """The matrix with orthonormal rows nearest to `matrix` [F, D] (F ≤ D, Frobenius norm; the
    orthogonal Procrustes solution): P Qᵀ of its thin SVD P Σ Qᵀ, in float64."""
    p, _, qt = np.linalg.svd(np.asarray(matrix, dtype=np.float64), full_matrices=False)
    return p @ qt


def ica_rotation(centred: np.ndarray, seed: int = 0, max_iter: int = 200) -> np.ndarray:
    """FastICA's unmixing directions of `centred` rows, made orthonormal (`polar_rows`).

    FastICA (sklearn, whitened) finds D directions along which the rows are least Gaussian —
    for rows built from a few of many factors, the factors. Its unmixing rows are not
    orthogonal in the embedding space; the polar factor is the rotation nearest to them. Each
    row gets the sign that puts its heavy tail on the positive side (so +j fires when its
    factor is present)."""
    import warnings

    from sklearn.decomposition import FastICA
    from sklearn.exceptions import ConvergenceWarning

    x = np.asarray(centred, dtype=np.float64)
    ica = FastICA(whiten="unit-variance", random_state=seed, max_iter=max_iter, tol=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ica.fit(x)
    w = ica.components_ / np.linalg.norm(ica.components_, axis=1, keepdims=True)
    s = x @ w.T
    skew = ((s - s.mean(axis=0)) ** 3).mean(axis=0)
    return reorthogonalise(polar_rows(w * np.where(skew < 0, -1.0, 1.0)[:, None]))
