"""Rotations from unconstrained parameters: orthogonal, differentiable, identity at zero."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.core.rotations import (
    cayley,
    orthogonality_error,
    reorthogonalise,
    skew_exponential,
    skew_from_upper,
)


@pytest.mark.parametrize("make", [cayley, skew_exponential])
@pytest.mark.parametrize("dim", [2, 7, 64])
def test_orthogonal_with_unit_determinant(make, dim: int):
    upper = torch.randn(
        dim * (dim - 1) // 2, dtype=torch.float64, generator=torch.Generator().manual_seed(dim)
    )
    r = make(upper, dim)
    assert orthogonality_error(r.numpy()) < 1e-10
    assert torch.linalg.det(r).item() == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("make", [cayley, skew_exponential])
def test_zero_parameters_give_the_identity(make):
    assert torch.equal(make(torch.zeros(6), 4), torch.eye(4))


def test_cayley_matches_its_definition():
    upper = torch.randn(10, dtype=torch.float64)
    a = skew_from_upper(upper, 5)
    assert torch.allclose(a, -a.T)
    eye = torch.eye(5, dtype=torch.float64)
    assert torch.allclose(cayley(upper, 5), torch.inverse(eye + a) @ (eye - a), atol=1e-12)


def test_cayley_is_stable_for_large_parameters_in_float32():
    upper = 50 * torch.randn(64 * 63 // 2, generator=torch.Generator().manual_seed(0))
    assert orthogonality_error(cayley(upper, 64).numpy()) < 1e-3
    assert orthogonality_error(reorthogonalise(cayley(upper, 64).numpy()).astype(np.float32)) < 1e-6


def test_gradients_flow():
    upper = torch.zeros(3, requires_grad=True)
    target = torch.tensor([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    loss = (cayley(upper, 3) - target).square().sum()
    loss.backward()
    assert upper.grad is not None and upper.grad.abs().sum() > 0


def test_wrong_parameter_count():
    with pytest.raises(ValueError, match="expected 6 upper-triangle values for dim 4"):
        cayley(torch.zeros(5), 4)


def test_reorthogonalise_fixes_a_perturbed_rotation():
    rotation = reorthogonalise(np.random.default_rng(0).normal(size=(16, 16)))
    noisy = rotation + 1e-3 * np.random.default_rng(1).normal(size=(16, 16))
    assert orthogonality_error(noisy) > 1e-4
    fixed = reorthogonalise(noisy)
    assert orthogonality_error(fixed) < 1e-12 and np.abs(fixed - rotation).max() < 1e-2
