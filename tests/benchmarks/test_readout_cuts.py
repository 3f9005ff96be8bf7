"""The readout-cut benchmark's scoring: macro figures and the dev comparison's halves."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.training.readout_cuts import dev_comparison, macro


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
