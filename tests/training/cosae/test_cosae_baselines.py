"""CoSAE's baselines: linear maps recover known maps, matching undoes known permutations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.core.rotations import random_rotation
from training.cosae.baselines import (
    least_squares_map,
    match_concepts,
    orthogonal_procrustes,
    train_universal_sae,
    universal_sae_config,
    with_domain_j_reordered,
)
from training.cosae.config import CosaeConfig
from training.cosae.crosscoder import train_crosscoder
from training.cosae.metrics import extraction_fvu, translation_fvu
from training.cosae.model import CoupledSae, encode_rows
from training.cosae.pairs import synthetic_pair

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_procrustes_recovers_a_known_rotation_exactly():
    rng = np.random.default_rng(0)
    rotation = random_rotation(8, seed=1)
    x_i = rng.normal(size=(50, 8)) + 3.0
    x_j = (x_i - x_i.mean(0)) @ rotation + rng.normal(size=8)
    fitted = orthogonal_procrustes(x_i, x_j)
    np.testing.assert_allclose(fitted.i_to_j, rotation, atol=1e-10)
    np.testing.assert_allclose(fitted.translate(x_i, "i"), x_j, atol=1e-5)
    np.testing.assert_allclose(fitted.translate(x_j, "j"), x_i, atol=1e-5)


def test_procrustes_across_dimensions_recovers_a_partial_isometry_and_its_scale():
    rng = np.random.default_rng(0)
    isometry = random_rotation(10, seed=2)[:6]  # [6, 10], orthonormal rows: R^6 into R^10
    x_i = rng.normal(size=(40, 6))
    x_j = 2.5 * (x_i - x_i.mean(0)) @ isometry
    fitted = orthogonal_procrustes(x_i, x_j)
    np.testing.assert_allclose(fitted.i_to_j, 2.5 * isometry, atol=1e-10)
    np.testing.assert_allclose(fitted.translate(x_j, "j"), x_i, atol=1e-5)  # scale 1/2.5
    unscaled = orthogonal_procrustes(x_i, x_j, scaled=False)
    np.testing.assert_allclose(unscaled.i_to_j @ unscaled.i_to_j.T, np.eye(6), atol=1e-10)


def test_least_squares_recovers_a_general_linear_map_and_interpolates_few_pairs():
    rng = np.random.default_rng(0)
    matrix = rng.normal(size=(5, 7))
    x_i = rng.normal(size=(60, 5))
    x_j = (x_i - x_i.mean(0)) @ matrix
    fitted = least_squares_map(x_i, x_j)
    np.testing.assert_allclose(fitted.i_to_j, matrix, atol=1e-10)
    few = least_squares_map(x_i[:3], x_j[:3], x_i.mean(0), x_j.mean(0))  # 3 pairs < 5 dims
    np.testing.assert_allclose(few.translate(x_i[:3], "i"), x_j[:3], atol=1e-5)
    ridge = least_squares_map(x_i, x_j, ridge=1e3)
    assert np.linalg.norm(ridge.i_to_j) < np.linalg.norm(fitted.i_to_j)


def test_matching_undoes_a_permutation_of_the_concepts():
    rng = np.random.default_rng(0)
    codes_i = rng.exponential(size=(200, 12)) * (rng.random((200, 12)) < 0.3)
    permutation = rng.permutation(12)
    codes_j = codes_i[:, permutation] + 0.01 * rng.random((200, 12))
    order = match_concepts(codes_i, codes_j)
    np.testing.assert_array_equal(permutation[order], np.arange(12))


def test_reordering_domain_j_reorders_its_codes_and_nothing_else():
    model = CoupledSae(6, 5, n_concepts=10, k_i=3, k_j=3, seed=0)
    x_j = np.random.default_rng(0).normal(size=(20, 5)).astype(np.float32)
    order = np.random.default_rng(1).permutation(10)
    reordered = with_domain_j_reordered(model, order)
    np.testing.assert_allclose(
        encode_rows(reordered, x_j, "j"), encode_rows(model, x_j, "j")[:, order], atol=1e-6
    )
    for name, value in model.domain_i.state_dict().items():
        torch.testing.assert_close(reordered.domain_i.state_dict()[name], value)


def test_crosscoder_and_universal_sae_learn_from_the_pairs():
    pair = synthetic_pair(rows=600, seed=4)
    config = CosaeConfig(
        n_concepts=24, k_i=4, k_j=4, steps=150, paired_batch_size=64, learning_rate=3e-3
    )
    x_i, x_j = pair.x_i[:500], pair.x_j[:500]
    crosscoder = train_crosscoder(x_i, x_j, config).model
    with torch.no_grad():
        codes = crosscoder.encode(torch.as_tensor(x_i), torch.as_tensor(x_j))
        recon_j = crosscoder.decode(codes, "j").numpy()
    assert (codes > 0).sum(dim=1).max() <= 4
    assert extraction_fvu(x_j, recon_j) < 0.5
    assert universal_sae_config(config).weights.active().keys() == {
        "reconstruction",
        "translation",
        "aux",
    }
    universal = train_universal_sae(x_i, x_j, config).model
    translated = universal.translate(torch.as_tensor(pair.x_i[500:]), "i").detach().numpy()
    assert translation_fvu(pair.x_j[500:], translated) < 0.9
