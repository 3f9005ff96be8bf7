"""The served-filter benchmark's judgement: precision, recall and F1 of allowed rows against
relevant rows."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.service.filters.served_filters import scores


def test_allowed_rows_are_scored_against_the_relevant_ones():
    allowed = np.array([1, 1, 1, 0, 0, 0], dtype=bool)
    relevant = np.array([1, 0, 0, 1, 0, 0], dtype=bool)
    precision, recall, f1 = scores(allowed, relevant)
    assert (precision, recall) == pytest.approx((1 / 3, 1 / 2))
    assert f1 == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))


def test_a_filter_that_finds_nothing_relevant_scores_zero():
    nothing = np.zeros(4, dtype=bool)
    assert scores(nothing, np.ones(4, dtype=bool)) == (0.0, 0.0, 0.0)
    assert scores(np.ones(4, dtype=bool), nothing) == (0.0, 0.0, 0.0)
