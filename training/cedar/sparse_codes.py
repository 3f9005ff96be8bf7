"""CEDAR's sparse codes: rotate, keep the k largest |coordinates|, map back. Pure functions.

z̃ = U(x − b);  Π_k keeps the k coordinates of largest absolute value per row;
x̂ = Uᵀ Π_k(z̃) + b.  At k = D nothing is dropped and x̂ = x exactly (U orthogonal).

A concept is a signed axis: +j and −j are different concepts. Concept ids are integers,
2j for +j and 2j + 1 for −j, so postings and filters can use plain integer arrays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def check_k(k: int, dim: int) -> int:
    if not 1 <= int(k) <= dim:
        raise ValueError(f"k must be between 1 and the dimension {dim}, got {k}")
    return int(k)


def top_k_abs(z: torch.Tensor, k: int) -> torch.Tensor:
    """Π_k(z): z with all but the k largest-|·| coordinates of each row set to zero."""
    import torch  # here, not at import: numpy users of this module load no torch

    check_k(k, z.shape[-1])
    if k == z.shape[-1]:
        return z
    index = z.abs().topk(k, dim=-1).indices
    return torch.zeros_like(z).scatter(-1, index, z.gather(-1, index))


def reconstruct_torch(
    x: torch.Tensor, rotation: torch.Tensor, mean: torch.Tensor, k: int
) -> torch.Tensor:
    """x̂ = Uᵀ Π_k(U(x − b)) + b for rows x (differentiable in U and b)."""
    return top_k_abs((x - mean) @ rotation.T, k) @ rotation + mean


def sparse_codes(
    x: np.ndarray, rotation: np.ndarray, mean: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The k active axes of each row and their values, by decreasing |value|: ([N, k], [N, k])."""
    z = (np.asarray(x, dtype=np.float32) - mean) @ np.asarray(rotation, dtype=np.float32).T
    k = check_k(k, z.shape[1])
    axes = np.argpartition(-np.abs(z), k - 1, axis=1)[:, :k]
    values = np.take_along_axis(z, axes, axis=1)
    order = np.argsort(-np.abs(values), axis=1, kind="stable")
    return np.take_along_axis(axes, order, axis=1), np.take_along_axis(values, order, axis=1)


def reconstruct(x: np.ndarray, rotation: np.ndarray, mean: np.ndarray, k: int) -> np.ndarray:
    """x̂ = Uᵀ Π_k(U(x − b)) + b, float32 [N, D]."""
    x = np.asarray(x, dtype=np.float32)
    axes, values = sparse_codes(x, rotation, mean, k)
    z = np.zeros_like(x)
    np.put_along_axis(z, axes, values, axis=1)
    return z @ np.asarray(rotation, dtype=np.float32) + mean


def concept_ids(axes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Signed concept ids: 2j where the value on axis j is positive, 2j + 1 where negative."""
    return 2 * np.asarray(axes, dtype=np.int64) + (np.asarray(values) < 0)


def concept_label(concept: int) -> str:
    """'+j' or '-j' for a concept id."""
    return f"{'-' if concept % 2 else '+'}{concept // 2}"


def parse_concept_label(label: str, dim: int) -> int:
    """The concept id of '+j' / '-j' (a bare 'j' means +j); ValueError naming the fault."""
    text = label.strip()
    sign, digits = (text[0], text[1:]) if text.startswith(("+", "-")) else ("+", text)
    if not (digits.isascii() and digits.isdigit()) or not 0 <= int(digits) < dim:
        raise ValueError(f"not a concept label: {label!r} (expected +j or -j with 0 <= j < {dim})")
    return 2 * int(digits) + (sign == "-")


def concept_direction(rotation: np.ndarray, concept: int) -> np.ndarray:
    """The concept's unit direction in the embedding space: ±(row j of U) = ±Uᵀ e_j."""
    row = np.asarray(rotation, dtype=np.float64)[concept // 2]
    return -row if concept % 2 else row
