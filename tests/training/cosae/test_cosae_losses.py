"""CoSAE's loss terms: zero where they should be, and responding to what they measure."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import wasserstein_distance

from training.cosae.losses import (
    concept_consistency_loss,
    cycle_loss,
    energy_alignment_loss,
    random_directions,
    reconstruction_loss,
    sliced_wasserstein_loss,
    sorted_wasserstein_loss,
    translation_loss,
    wasserstein_1d,
)
from training.cosae.model import CoupledSae

DIM_I, DIM_J, CONCEPTS, ACTIVE = 12, 16, 8, 2


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def sparse_codes(n: int, seed: int, concepts: int = CONCEPTS) -> torch.Tensor:
    """Non-negative codes with exactly ACTIVE concepts per row, values in [0.5, 1.5]."""
    rng = np.random.default_rng(seed)
    codes = np.zeros((n, concepts))
    for row in codes:
        row[rng.choice(concepts, ACTIVE, replace=False)] = rng.uniform(0.5, 1.5, ACTIVE)
    return torch.as_tensor(codes, dtype=torch.float32)


def perfect_translator() -> tuple[CoupledSae, torch.Tensor, torch.Tensor]:
    """A coupled model that encodes both domains exactly to the codes that generated them.

    x_d = f Q_dᵀ with Q_d [D_d, M] orthonormal columns; each half has W_enc = Q_dᵀ, W_dec = Q_d,
    no biases and s = 1, so E_d(x_d) = TopK_2(ReLU(f)) = f and D_j(E_i(x_i)) = x_j exactly.
    """
    model = CoupledSae(DIM_I, DIM_J, CONCEPTS, k_i=ACTIVE, k_j=ACTIVE)
    codes = sparse_codes(64, seed=3)
    rows = []
    for seed, half in ((1, model.domain_i), (2, model.domain_j)):
        basis, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((half.dim, CONCEPTS)))
        q = torch.as_tensor(basis, dtype=torch.float32)
        with torch.no_grad():
            half.w_dec.copy_(q)
            half.w_enc.copy_(q.T)
            half.b_enc.zero_()
            half.b_dec.zero_()
            half.input_scale.fill_(1.0)
        rows.append(codes @ q.T)
    return model, rows[0], rows[1]


def test_reconstruction_loss_is_zero_for_a_perfect_reconstruction_and_one_for_the_mean():
    x = torch.randn(50, 6, generator=torch.Generator().manual_seed(0))
    variance = float((x - x.mean(0)).square().sum(1).mean())
    assert float(reconstruction_loss(x, x, variance)) == 0.0
    mean = x.mean(0).expand_as(x)
    assert float(reconstruction_loss(x, mean, variance)) == pytest.approx(1.0, rel=1e-5)
    with pytest.raises(ValueError, match="variance"):
        reconstruction_loss(x, x, 0.0)


def test_translation_loss_is_zero_for_a_perfect_translator_and_grows_when_it_is_broken():
    model, x_i, x_j = perfect_translator()
    var_i = float((x_i - x_i.mean(0)).square().sum(1).mean())
    var_j = float((x_j - x_j.mean(0)).square().sum(1).mean())
    with torch.no_grad():
        assert float(translation_loss(x_j, model.translate(x_i, "i"), var_j)) < 1e-10
        assert float(translation_loss(x_i, model.translate(x_j, "j"), var_i)) < 1e-10
        model.domain_j.w_dec.copy_(model.domain_j.w_dec.roll(1, dims=1))  # concepts misaligned
        assert float(translation_loss(x_j, model.translate(x_i, "i"), var_j)) > 0.5
        # its own reconstruction of domain i is untouched by domain j's decoder
        assert float(reconstruction_loss(x_i, model.reconstruct(x_i, "i"), var_i)) < 1e-10


def test_cycle_loss_is_zero_for_a_perfect_translator():
    model, x_i, _ = perfect_translator()
    var_i = float((x_i - x_i.mean(0)).square().sum(1).mean())
    with torch.no_grad():
        back = model.translate(model.translate(x_i, "i"), "j")
        assert float(cycle_loss(x_i, back, var_i)) < 1e-10
        model.domain_j.w_enc.copy_(model.domain_j.w_enc.roll(1, dims=0))
        back = model.translate(model.translate(x_i, "i"), "j")
        assert float(cycle_loss(x_i, back, var_i)) > 0.5


def test_concept_consistency_is_zero_for_equal_codes_two_for_disjoint_and_scale_free():
    codes = sparse_codes(40, seed=0)
    assert float(concept_consistency_loss(codes, codes)) == 0.0
    left = torch.cat([codes, torch.zeros_like(codes)], dim=1)
    right = torch.cat([torch.zeros_like(codes), codes], dim=1)
    assert float(concept_consistency_loss(left, right)) == pytest.approx(2.0)
    other = sparse_codes(40, seed=1)
    value = float(concept_consistency_loss(codes, other))
    assert 0 < value < 2
    assert float(concept_consistency_loss(0.1 * codes, 0.1 * other)) == pytest.approx(value)
    with pytest.raises(ValueError, match="rows"):
        concept_consistency_loss(codes, codes[:10])


def test_energy_alignment_ignores_row_order_and_sees_a_concept_firing_more_strongly():
    codes = sparse_codes(200, seed=0)
    shuffled = codes[torch.randperm(200, generator=torch.Generator().manual_seed(1))]
    assert float(energy_alignment_loss(codes, shuffled)) < 1e-6
    louder = codes.clone()
    louder[:, 0] *= 3
    assert float(energy_alignment_loss(codes, louder)) > 0.05
    assert float(energy_alignment_loss(codes, codes[:50])) >= 0  # sizes may differ


def test_wasserstein_1d_matches_scipy_per_column_with_unequal_sizes_and_ties():
    rng = np.random.default_rng(0)
    a = rng.exponential(size=(37, 5))
    b = rng.normal(1.0, 2.0, size=(53, 5))
    a[:10, 0] = 0.0  # ties, as in sparse codes
    b[:20, 0] = 0.0
    ours = wasserstein_1d(torch.as_tensor(a), torch.as_tensor(b)).numpy()
    expected = [wasserstein_distance(a[:, c], b[:, c]) for c in range(5)]
    np.testing.assert_allclose(ours, expected, rtol=1e-10, atol=1e-12)


def test_sorted_wasserstein_gradient_moves_one_sample_towards_the_other():
    a = torch.as_tensor(np.random.default_rng(0).exponential(size=(64, 4)), dtype=torch.float32)
    b = (a + 1.0).clone().requires_grad_(True)  # every concept shifted by 1
    before = sorted_wasserstein_loss(a, b)
    before.backward()
    assert b.grad is not None and float(b.grad.abs().sum()) > 0
    with torch.no_grad():
        after = sorted_wasserstein_loss(a, b - 0.5 * b.grad / b.grad.abs().max())
    assert float(after) < float(before.detach())
    assert float(sorted_wasserstein_loss(a, a[torch.randperm(64)])) < 1e-6


def test_sliced_wasserstein_is_near_zero_for_one_distribution_and_positive_for_a_shift():
    generator = torch.Generator().manual_seed(0)
    one, two = sparse_codes(2000, seed=10), sparse_codes(2000, seed=11)
    directions = random_directions(CONCEPTS, 32, generator)
    assert torch.allclose(directions.norm(dim=0), torch.ones(32))
    same = float(sliced_wasserstein_loss(one, two, directions))
    shifted = two.clone()
    shifted[:, :3] += 0.5
    moved = float(sliced_wasserstein_loss(one, shifted, directions))
    assert same < 0.05
    assert moved > 10 * same and moved > 0.1
    with pytest.raises(ValueError, match="directions"):
        sliced_wasserstein_loss(one, two, directions[:3])
