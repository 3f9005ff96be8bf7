"""A concept's trust on a gallery nobody labelled (training/cedar/gallery_trust.py): a name wins
on a row when its standardised score beats its nearest words', and its agreement is the share
of its active rows where it wins.

The premises are built into the fixtures: directions whose nearest neighbours are known by
construction, rows whose scores along each word are known, and a coder whose catalog says which
concepts are zero-shot."""

from __future__ import annotations

import numpy as np
import pytest

from indexer.vocabulary.gallery_directions import gallery_moments, with_hubs
from training.cedar.gallery_trust import (
    agreement,
    neighbourhoods,
    shifted,
    standard_scores,
    wilson_upper,
    wins,
    word_spread,
)


def unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_a_words_neighbours_are_the_others_nearest_first_never_itself():
    # word 0 lies between 1 (near) and 2 (farther); 3 points away from all of them
    text = unit([[1, 0, 0], [0.9, 0.1, 0], [0.7, 0.7, 0], [-1, 0, 0.1]])
    near = neighbourhoods(text, 2)
    assert near.shape == (4, 2)
    assert near[0].tolist() == [1, 2]
    assert near[1].tolist() == [0, 2]
    assert all(w not in near[w] for w in range(4))
    assert neighbourhoods(text[:1], 3).shape == (1, 0)  # a lone word has none


def test_neighbourhoods_agree_with_a_full_sort_on_many_words():
    text = unit(np.random.default_rng(0).standard_normal((2500, 16)))
    cosine = text @ text.T
    np.fill_diagonal(cosine, -np.inf)
    expected = np.argsort(-cosine, axis=1, kind="stable")[:, :5]
    assert np.array_equal(neighbourhoods(text, 5), expected)


def test_a_words_spread_is_the_mean_and_deviation_of_its_corrected_scores():
    rng = np.random.default_rng(1)
    features = unit(rng.standard_normal((400, 8))).astype(np.float32)
    hubs = rng.uniform(0, 0.3, 400).astype(np.float32)
    text = unit(rng.standard_normal((6, 8)))
    moments = gallery_moments([with_hubs(features, hubs)], len(features))
    mu, sigma = word_spread(moments.mean, moments.second, text)
    scores = features @ text.T - hubs[:, None]
    assert np.allclose(mu, scores.mean(axis=0), atol=1e-5)
    assert np.allclose(sigma, scores.std(axis=0), atol=1e-5)
    z = standard_scores(features, hubs, text, mu, sigma)
    assert np.allclose(z, (scores - mu) / sigma, atol=1e-4)


def test_a_name_wins_where_it_reaches_every_neighbour():
    own = np.array([2.0, 1.0, 0.5])
    neighbours = np.array([[1.0, 1.9], [1.0, 0.2], [0.6, 0.1]])
    assert wins(own, neighbours).tolist() == [True, True, False]  # a tie wins
    assert wins(own, np.zeros((3, 0))).tolist() == [True, True, True]


def test_agreement_is_the_share_won_and_unmeasured_below_the_minimum():
    got = agreement(np.array([3, 0, 1]), np.array([4, 10, 2]), min_rows=3)
    assert got[0] == pytest.approx(0.75) and got[1] == 0.0 and np.isnan(got[2])


def test_the_wilson_upper_bound_lies_above_the_share_and_closes_in_with_more_rows():
    few, many = wilson_upper(np.array([2, 20]), np.array([10, 100]), 1.0)
    assert 0.2 < many < few <= 1.0
    assert wilson_upper(np.array([0]), np.array([0]), 1.0)[0] > 0  # no rows: no certainty


def test_a_concept_shifted_where_its_gallery_share_falls_below_the_ratio_with_confidence():
    reference = np.array([[90, 100], [90, 100], [90, 100], [90, 100], [2, 3]])
    gallery = np.array([[10, 100], [80, 100], [1, 4], [40, 100], [0, 50]])
    got = shifted(gallery, reference, ratio=0.6, z=1.0, min_rows=5)
    # fell to 0.1: shifted; 0.8 held; 4 rows: unmeasured; 0.4 < 0.54 even at its upper bound;
    # a reference of 3 rows: unmeasured
    assert got.tolist() == [True, False, False, True, False]
    assert not shifted(gallery, reference, ratio=0.6, z=8.0)[3]  # less sure: not hidden
