"""CoSAE's metrics on hand-made codes and rows whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest

from training.cosae.metrics import (
    active_set_overlap,
    concept_consistency,
    cross_correlations,
    cycle_fvu,
    mean_cosine,
    recall_at_1,
    shared_factor_recovery,
    translation_fvu,
)


def test_recall_at_1_is_one_for_exact_translations_and_near_chance_for_shuffled_ones():
    gallery = np.random.default_rng(0).normal(size=(100, 8))
    assert recall_at_1(gallery + 1e-3, gallery) == 1.0
    shuffled = gallery[np.random.default_rng(1).permutation(100)]
    assert recall_at_1(shuffled, gallery) < 0.1
    with pytest.raises(ValueError, match="row-aligned"):
        recall_at_1(gallery[:5], gallery)


def test_translation_fvu_and_cosine_of_perfect_and_mean_translations():
    x = np.random.default_rng(0).normal(size=(50, 4)) + 2
    assert translation_fvu(x, x) == 0.0 and mean_cosine(x, x) == pytest.approx(1.0)
    assert translation_fvu(x, np.broadcast_to(x.mean(0), x.shape)) == pytest.approx(1.0)
    assert mean_cosine(x, -x) == pytest.approx(-1.0)
    assert cycle_fvu(x, x) == 0.0


def test_active_set_overlap_of_a_worked_example():
    codes_i = np.array([[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    codes_j = np.array([[0.0, 0.5, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    # {0, 1} vs {1, 2}: Jaccard 1/3, F1 2·1/(2 + 2) = 1/2; the empty pair is left out
    overlap = active_set_overlap(codes_i, codes_j)
    assert overlap == {"jaccard": pytest.approx(1 / 3), "f1": pytest.approx(0.5)}
    assert np.isnan(active_set_overlap(codes_i[1:], codes_j[1:])["f1"])


def test_concept_consistency_counts_live_concepts_and_their_correlation():
    rng = np.random.default_rng(0)
    codes = rng.exponential(size=(80, 5)) * (rng.random((80, 5)) < 0.5)
    codes[:, 4] = 0.0  # dead in both domains: not live, not averaged
    same = concept_consistency(codes, codes)
    assert same["live"] == 4
    assert same["correlation"] == pytest.approx(1.0)
    assert same["jaccard"] == pytest.approx(1.0) and same["f1"] == pytest.approx(1.0)
    other = codes.copy()
    other[:, 0] = 0.0  # concept 0 never fires in domain j: live, correlation 0
    assert concept_consistency(codes, other)["correlation"] == pytest.approx(0.75)


def test_cross_correlations_of_known_columns():
    a = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    b = np.array([[3.0], [2.0], [1.0]])
    np.testing.assert_allclose(cross_correlations(a, b), [[-1.0], [0.0]])


def test_shared_factor_recovery_needs_the_same_concept_in_both_domains():
    rng = np.random.default_rng(0)
    factors = rng.exponential(size=(300, 4)) * (rng.random((300, 4)) < 0.3)
    codes = np.hstack([factors, rng.random((300, 3))])  # concepts 0-3 are the factors
    noisy = codes + 0.05 * rng.random(codes.shape)
    assert shared_factor_recovery(codes, noisy, factors) == 1.0
    swapped = noisy[:, [1, 0, 2, 3, 4, 5, 6]]  # factors 0, 1 under each other's index in j
    assert shared_factor_recovery(codes, swapped, factors) == 0.5
    assert shared_factor_recovery(codes, rng.random(codes.shape), factors) == 0.0
