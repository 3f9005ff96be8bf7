"""The readout-cut benchmark's scoring: macro figures and the dev comparison's halves."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.training.readout_cuts import cut_with_test_labels, dev_comparison, macro


def test_macro_figures_are_the_means_over_words():
    allowed = np.array([[1, 1], [1, 0], [0, 0], [0, 1]], dtype=bool)
    relevant = np.array([[1, 0], [0, 0], [1, 0], [0, 1]], dtype=bool)
    figures = macro(allowed, relevant)
    # word 0: 1 hit of 2 allowed, of 2 relevant; word 1: 1 of 2, of 1
    assert figures["precision"] == pytest.approx(0.5)
    assert figures["recall"] == pytest.approx((0.5 + 1.0) / 2)
    assert figures["f1"] == pytest.approx((0.5 + 2 / 3) / 2, abs=1e-4)
    assert figures["words"] == 2


def test_each_rule_is_scored_on_the_half_it_did_not_cut_on():
    """Premise: word 0's scores separate its relevant rows perfectly on every row, word 1 has
    too few relevant rows in either half to be scored. Both rules then find word 0's cut, and
    score it perfectly on the other half; word 1 is left out of the figures."""
    rng = np.random.default_rng(0)
    groups = [str(i // 5) for i in range(600)]
    relevant = np.zeros((600, 2), dtype=bool)
    relevant[rng.choice(600, 120, replace=False), 0] = True
    relevant[:3, 1] = True
    logits = np.where(relevant, 2.0, -2.0) + rng.normal(scale=0.1, size=(600, 2))
    train_relevant = rng.random((900, 2)) < 0.2
    train = (
        np.where(train_relevant, 2.0, -2.0) + rng.normal(scale=0.1, size=(900, 2)),
        train_relevant,
    )
    result = dev_comparison(logits, relevant, groups, train, min_calibration=5, seed=0)
    assert len(result) == 2
    for rules in result.values():
        for figures in rules.values():
            assert figures["words"] == 1
            assert figures["f1"] == pytest.approx(1.0)


def test_a_cut_with_test_labels_moves_only_where_they_outweigh_the_calibration_rows():
    """Premise: the calibration rows separate at margin 0, the test rows at 1 (every test row
    scores above 0). With 1,000 calibration rows against 100 test rows a half, the cut picked on
    both stays at 0, so it scores what the artifact's own cut scores (every test row let
    through); picked on test labels alone it moves to 1 and separates them perfectly."""
    rng = np.random.default_rng(1)
    test_relevant = rng.random((200, 1)) < 0.3
    test = np.where(test_relevant, 1.5, 0.5)
    calibration_relevant = rng.random((1000, 1)) < 0.3
    calibration = np.where(calibration_relevant, 0.5, -0.5)
    halves = np.arange(200) < 100
    labelled = cut_with_test_labels(
        test, test_relevant, halves, (calibration, calibration_relevant)
    )
    wanted = test_relevant.sum()
    assert labelled[0] == pytest.approx(2 * wanted / (200 + wanted))
    separated = cut_with_test_labels(
        test, test_relevant, halves, (calibration[:0], calibration_relevant[:0])
    )
    assert separated[0] == pytest.approx(1.0)
