"""The metric definitions (docs/reference/metrics.md), on cases whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from training.core.granularity import validate_contract
from training.core.metrics import (
    NEGATIVE_LEVELS,
    drift,
    fraction_of_variance_unexplained,
    hard_negative_accuracy,
    hard_negative_table,
    neighbour_recall,
    prefix_cosine,
    prefix_vectors,
    present_rows,
    recall_at,
    selectivity,
    staircase,
    target_ranks,
    unit_rows,
)
from training.views.negatives import NEGATIVE_KINDS

CONTRACT = validate_contract(
    {"object": 1, "attribute": 2, "relation": 3, "caption": 4, "full": 5}, 5
)


def test_prefix_cosine():
    a = np.array([[1.0, 0, 0, 0, 0], [1, 1, 0, 0, 0]])
    b = np.array([[1.0, 5, 0, 0, 0], [1, -1, 0, 0, 0]])
    np.testing.assert_allclose(prefix_cosine(a, b, 1), [1.0, 1.0])
    np.testing.assert_allclose(prefix_cosine(a, b, 2), [1 / np.sqrt(26), 0.0])


def test_hard_negative_accuracy_counts_strict_wins():
    anchor = np.array([[1.0, 0.0], [1.0, 0.0]])
    positive = np.array([[1.0, 0.1], [0.0, 1.0]])
    negative = np.array([[0.0, 1.0], [0.0, 1.0]])  # second triple is a tie: not a win
    assert hard_negative_accuracy(anchor, positive, negative, 2) == 0.5


def staircase_case() -> dict[str, dict[int, float]]:
    """An ideal transform: each type separated from its own prefix on, at chance before it."""
    levels = {"object": 1, "attribute": 2, "relation": 3, "order": 4}
    return {t: {n: (1.0 if n >= lvl else 0.5) for n in range(1, 6)} for t, lvl in levels.items()}


def test_selectivity_and_staircase_of_an_ideal_transform():
    table = staircase_case()
    assert selectivity(table, CONTRACT) == 1.0
    assert staircase(table, CONTRACT) == pytest.approx(50.0)


def test_staircase_of_truncation_like_behaviour_is_zero():
    flat = {t: dict.fromkeys(range(1, 6), 0.7) for t in ("attribute", "relation", "order")}
    assert staircase(flat, CONTRACT) == pytest.approx(0.0)
    assert selectivity(flat, CONTRACT) == pytest.approx(0.7)


def test_table_from_constructed_embeddings():
    rng = np.random.default_rng(0)
    anchor = rng.normal(size=(200, 5))
    positive = anchor.copy()
    negative = anchor.copy()
    negative[:, 1] = -negative[:, 1]  # differs only in coordinate 2 (the attribute prefix)
    table = hard_negative_table(anchor, positive, {"attribute": negative}, [1, 2, 5])
    assert table["attribute"][1] == 0.0  # identical on the first coordinate: ties, no wins
    assert table["attribute"][2] == 1.0


def test_rows_without_a_negative_are_left_out_and_absent_types_are_not_averaged():
    rng = np.random.default_rng(0)
    anchor = rng.normal(size=(10, 5))
    negative = -anchor  # always beaten ...
    negative[:4] = anchor[:4]  # ... except on four rows, where it ties with the positive
    negative[:4] = np.nan  # which hold no negative of this type
    assert present_rows(negative).tolist() == [False] * 4 + [True] * 6
    assert hard_negative_accuracy(anchor, anchor, negative, 5) == 1.0
    table = hard_negative_table(
        anchor,
        anchor,
        {"swap_attribute": negative, "add_object": np.full_like(anchor, np.nan)},
        [1, 2, 3, 4, 5],
    )
    assert set(table) == {"swap_attribute"}  # a type no row holds is no row of the table
    # the compositional corpus has four types, real captions seven: each averages what it has
    assert selectivity(table, CONTRACT) == 1.0
    assert staircase(table, CONTRACT) == pytest.approx(100 * (1.0 - 1.0))


def test_every_negative_type_has_a_level():
    assert set(NEGATIVE_LEVELS) == set(NEGATIVE_KINDS)
    assert NEGATIVE_LEVELS["add_object"] == NEGATIVE_LEVELS["object"]
    assert NEGATIVE_LEVELS["add_attribute"] == NEGATIVE_LEVELS["attribute"]
    assert NEGATIVE_LEVELS["swap_attribute"] == NEGATIVE_LEVELS["order"]


def test_drift_of_a_rotation_and_of_a_nonlinear_map():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(50, 8)), rng.normal(size=(50, 8))
    q, _ = np.linalg.qr(rng.normal(size=(8, 8)))
    assert drift(a, b, a @ q.T, b @ q.T) < 1e-12
    assert drift(a, b, np.tanh(a), np.tanh(b)) > 1e-3


def test_fvu():
    x = np.random.default_rng(2).normal(size=(100, 4))
    assert fraction_of_variance_unexplained(x, x) == 0.0
    assert fraction_of_variance_unexplained(x, np.tile(x.mean(axis=0), (100, 1))) == pytest.approx(
        1.0
    )


def test_prefixes_are_unit_rows_of_the_first_coordinates():
    z = np.array([[3.0, 4.0, 12.0], [0.0, 0.0, 1.0]], dtype=np.float32)
    p = prefix_vectors(z, 2)
    np.testing.assert_allclose(p[0], [0.6, 0.8])
    np.testing.assert_array_equal(p[1], [0.0, 0.0])  # a zero prefix stays zero, no NaN
    assert p.flags.c_contiguous and p.dtype == np.float32
    with pytest.raises(ValueError, match="prefix of length 4"):
        prefix_vectors(z, 4)


def test_unit_rows_in_float64_keep_zero_rows():
    x = np.array([[3.0, 4.0], [0.0, 0.0]])
    u = unit_rows(x, np.float64)
    assert u.dtype == np.float64 and u.flags.c_contiguous
    np.testing.assert_array_equal(u, [[0.6, 0.8], [0.0, 0.0]])


def test_target_ranks_and_recall_with_either_tie_rule():
    gallery = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    queries = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    targets = np.array([0, 1, 2, 0])
    # rows 0 and 1 tie: "against" counts the other one as ahead, "by_row" only an earlier one
    assert target_ranks(queries, gallery, targets, "against").tolist() == [1, 1, 0, 2]
    assert target_ranks(queries, gallery, targets, "by_row").tolist() == [0, 1, 0, 1]
    for batch in (1, 3):
        ranks = target_ranks(queries, gallery, targets, "by_row", batch=batch)
        assert ranks.tolist() == [0, 1, 0, 1]
    assert recall_at(np.array([0, 1, 0, 1]), (1, 2)) == {1: 0.5, 2: 1.0}


def test_neighbour_recall_counts_found_rows_of_the_exact_search():
    assert neighbour_recall(np.array([[1, 7], [3, -1]]), np.array([[1, 2], [3, 0]])) == 0.5
    assert neighbour_recall(np.zeros((0, 3), int), np.zeros((0, 3), int)) == 1.0
