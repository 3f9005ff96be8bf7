"""The readout's discriminant reading: the mentions matrix, Fisher's direction under a shrunk
covariance, and the sum in standard units."""

from __future__ import annotations

import numpy as np
import pytest

from training.cedar.readout.discriminant import (
    discriminant_directions,
    mention_matrix,
    standard_units,
    summed_in_standard_units,
    with_discriminant,
)


def test_the_mentions_matrix_marks_each_rows_own_words():
    matrix = mention_matrix([frozenset({0, 2}), frozenset(), frozenset({1})], 3)
    assert matrix.shape == (3, 3)
    assert matrix.toarray().tolist() == [[1, 0, 1], [0, 0, 0], [0, 1, 0]]


def clusters(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Premise: 400 rows in 3 dims; the rows using word 0 sit 1 higher on axes 0 and 1, but
    axis 1 is ten times as noisy, so the mean difference alone points half along a useless
    axis and the discriminant should lean on axis 0. Word 1 is used by no row."""
    rng = np.random.default_rng(seed)
    uses = rng.random(400) < 0.3
    x = rng.normal(size=(400, 3)) * np.array([0.3, 3.0, 1.0])
    x[uses, :2] += 1.0
    return x, uses


def test_the_direction_weighs_each_axis_by_its_noise_and_separates_the_rows_that_use_the_word():
    x, uses = clusters()
    mentions = mention_matrix([frozenset({0}) if u else frozenset() for u in uses], 2)
    weight, offset = discriminant_directions(x, mentions, shrinkage=0.01)
    assert weight.shape == (2, 3) and offset.shape == (2,)
    assert abs(weight[0, 0]) > 10 * abs(weight[0, 1])  # the quiet axis carries the word
    scores = x @ weight[0] + offset[0]
    assert scores[uses].mean() > scores[~uses].mean()
    assert scores.mean() == pytest.approx(0.0, abs=1e-4)  # centred at the rows' mean
    assert np.all(weight[1] == 0) and offset[1] == 0  # no row uses word 1


def test_full_shrinkage_gives_the_mean_difference_direction():
    x, uses = clusters()
    mentions = mention_matrix([frozenset({0}) if u else frozenset() for u in uses], 1)
    weight, _ = discriminant_directions(x, mentions, shrinkage=1.0)
    difference = x[uses].mean(axis=0) - x.mean(axis=0)
    cosine = weight[0] @ difference / np.linalg.norm(weight[0]) / np.linalg.norm(difference)
    assert cosine == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("shrinkage", [0.0, -0.1, 1.5])
def test_a_shrinkage_outside_the_unit_interval_is_refused(shrinkage):
    x, _ = clusters()
    with pytest.raises(ValueError, match="shrinkage"):
        discriminant_directions(x, mention_matrix([frozenset()] * len(x), 1), shrinkage)


def test_standard_units_give_each_score_mean_zero_and_unit_spread_and_only_centre_a_flat_one():
    rng = np.random.default_rng(1)
    rows = rng.normal(size=(200, 4))
    weight = np.array([[2.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    offset = np.array([3.0, 5.0], dtype=np.float32)
    w, b = standard_units(weight, offset, rows)
    scores = rows @ w.T + b
    assert scores[:, 0].mean() == pytest.approx(0.0, abs=1e-5)
    assert scores[:, 0].std() == pytest.approx(1.0, abs=1e-5)
    assert np.allclose(scores[:, 1], 0.0)


def test_the_sum_is_the_sum_of_the_standardised_scores_and_stays_linear():
    rng = np.random.default_rng(2)
    rows = rng.normal(size=(300, 5))
    parts = [
        (rng.normal(size=(3, 5)).astype(np.float32), rng.normal(size=3).astype(np.float32))
        for _ in range(2)
    ]
    weight, offset = summed_in_standard_units(parts, rows)
    fresh = rng.normal(size=(20, 5))
    expected = np.zeros((20, 3))
    for w, b in parts:
        on_rows = rows @ w.T + b
        expected += (fresh @ w.T + b - on_rows.mean(axis=0)) / on_rows.std(axis=0)
    assert np.allclose(fresh @ weight.T + offset, expected, atol=1e-4)


def test_with_discriminant_ranks_the_rows_that_use_the_word_above_a_blind_logistic():
    """Premise: a logistic readout that reads only noise (axis 2) ranks the rows at random; the
    sum with the discriminant, in standard units, ranks the rows that use the word higher."""
    x, uses = clusters()
    mentions = mention_matrix([frozenset({0}) if u else frozenset() for u in uses], 1)
    blind = (np.array([[0.0, 0.0, 1.0]], dtype=np.float32), np.zeros(1, dtype=np.float32))
    weight, offset = with_discriminant(blind, x, mentions)
    scores = x @ weight[0] + offset[0]
    blind_scores = x @ blind[0][0]
    gap = scores[uses].mean() - scores[~uses].mean()
    assert gap > 1.0 and gap > blind_scores[uses].mean() - blind_scores[~uses].mean() + 1.0
