"""Where each learnt word concept is cut (training.cedar.readout.cuts)."""

from __future__ import annotations

import numpy as np
import pytest

from training.cedar.readout.cuts import (
    CALIBRATION_TRAIN_ROWS,
    best_cuts,
    calibrate,
    calibration_sample,
    global_cut,
    split_calibration,
)


def brute_best_f1(scores: np.ndarray, relevant: np.ndarray) -> float:
    best = 0.0
    for t in np.unique(scores):
        allowed = scores >= t
        hits = (allowed & relevant).sum()
        best = max(best, 2 * hits / (allowed.sum() + relevant.sum()))
    return best


def test_best_cuts_find_the_best_f1_of_every_word():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(200, 6))
    relevant = rng.random((200, 6)) < 0.2
    relevant[:, 5] = False
    cuts, f1 = best_cuts(scores, relevant)
    for w in range(5):
        assert f1[w] == pytest.approx(brute_best_f1(scores[:, w], relevant[:, w]))
        allowed = scores[:, w] >= cuts[w]
        hits = (allowed & relevant[:, w]).sum()
        assert 2 * hits / (allowed.sum() + relevant[:, w].sum()) == pytest.approx(f1[w])
    assert np.isinf(cuts[5]) and f1[5] == 0.0  # no relevant row: the word allows nothing


def test_calibration_gives_unsupported_words_the_global_threshold():
    """Words 0 and 1 are learnt on scales 6 logits apart, so one cut cannot serve both: a word
    whose own cut lies far from the global one keeps its own; word 2 has too few relevant
    rows; word 3 enough, but its scores are noise, and its held-out precision says so."""
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(400, 4))
    relevant = logits + rng.normal(scale=0.5, size=logits.shape) > 1.0
    logits[:, 0] += 3.0
    logits[:, 1] -= 3.0
    relevant[:, 2] = False
    relevant[:3, 2] = True  # too few relevant rows for a threshold of its own
    relevant[:, 3] = False
    relevant[rng.choice(400, size=8, replace=False), 3] = True  # independent of its scores
    calibration = split_calibration([str(i // 5) for i in range(400)], seed=0)
    assert 0.3 < calibration.mean() < 0.7
    found = calibrate(logits, relevant, calibration, min_calibration=5)
    own_cuts, _ = best_cuts(logits, relevant)
    far = np.abs(own_cuts[:2] - found["global"]) > 2
    assert far.any()
    assert found["own"][:2][far].all()
    assert found["threshold"][:2][far] == pytest.approx(own_cuts[:2][far])
    assert not found["own"][2]
    assert found["threshold"][2] == pytest.approx(found["global"])
    assert found["precision"][3] < 0.1
    assert 0 < found["precision"][0] <= 1 and 0 < found["recall"][0] <= 1
    assert 0 < found["precision"][1] <= 1 and 0 < found["recall"][1] <= 1


def ranked_best_cuts(scores: np.ndarray, relevant: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every cut of every word tried on the whole stable ranking: what best_cuts must equal."""
    n, v = scores.shape
    order = np.argsort(-scores, axis=0, kind="stable")
    ranked = np.take_along_axis(scores, order, axis=0)
    hits = np.cumsum(np.take_along_axis(relevant, order, axis=0), axis=0, dtype=np.float64)
    total = hits[-1]
    f1 = 2 * hits / (np.arange(1, n + 1)[:, None] + np.maximum(total, 1))
    best, cols = np.argmax(f1, axis=0), np.arange(v)
    below = np.where(best + 1 < n, ranked[np.minimum(best + 1, n - 1), cols], -np.inf)
    cut = np.where(np.isfinite(below), (ranked[best, cols] + below) / 2, ranked[best, cols])
    return np.where(total > 0, cut, np.inf), np.where(total > 0, f1[best, cols], 0.0)


@pytest.mark.parametrize("decimals", [None, 1])
def test_best_cuts_rank_only_the_rows_that_can_matter_and_match_the_whole_ranking(decimals):
    """Words from rare to common, well and badly ranked, and (rounded) scores full of ties:
    the cut and F1 of every word as a ranking of every row gives them."""
    rng = np.random.default_rng(5)
    scores = rng.normal(size=(2000, 40))
    noise = rng.normal(size=scores.shape) * np.linspace(0.1, 5, 40)
    relevant = scores + noise > np.linspace(1.0, 3.5, 40)
    relevant[:, 0] = False
    relevant[:, 1] = True
    if decimals is not None:
        scores = np.round(scores, decimals)
    cuts, f1 = best_cuts(scores, relevant)
    expected_cuts, expected_f1 = ranked_best_cuts(scores, relevant)
    assert np.array_equal(f1, expected_f1)
    assert np.array_equal(cuts, expected_cuts)


def test_the_global_cut_is_the_first_best_mean_f1_on_its_grid():
    rng = np.random.default_rng(4)
    scores = rng.normal(size=(300, 30))
    relevant = scores + rng.normal(size=scores.shape) > 1.2
    words = np.arange(0, scores.shape[1], 3)
    grid = np.unique(np.quantile(scores[:, words], np.linspace(0.5, 0.9999, 400)))
    allowed = scores[:, words][None] >= grid[:, None, None]
    hits = (allowed & relevant[:, words][None]).sum(axis=1)
    mean_f1 = (2 * hits / np.maximum(allowed.sum(axis=1) + relevant[:, words].sum(axis=0), 1)).mean(
        axis=1
    )
    assert global_cut(scores, relevant, words) == grid[int(np.argmax(mean_f1))]


def test_train_rows_give_a_rare_word_its_own_cut_and_never_enter_its_held_out_figures():
    """Premise: word 0 is learnt on a scale 3 logits above word 1's, so one cut cannot serve
    both, and the val rows hold only 3 of its relevant rows (too few for a cut of its own); the
    train rows hold many more. With them it keeps its own cut, the best-F1 cut of train and val
    rows together; its held-out figures still count val rows only (a train row relevant to word
    1 everywhere would otherwise lift its recall)."""
    rng = np.random.default_rng(2)

    def rows(n: int) -> tuple[np.ndarray, np.ndarray]:
        logits = rng.normal(size=(n, 2))
        relevant = logits + rng.normal(scale=0.3, size=logits.shape) > 1.0
        logits[:, 0] += 3.0
        return logits, relevant

    logits, relevant = rows(400)
    keep = np.flatnonzero(relevant[:, 0])[:3]
    relevant[:, 0] = False
    relevant[keep, 0] = True
    calibration = split_calibration([str(i // 5) for i in range(400)], seed=0)
    alone = calibrate(logits, relevant, calibration, min_calibration=5)
    assert not alone["own"][0]
    train = rows(2000)
    joined = calibrate(logits, relevant, calibration, 5, train)
    assert joined["own"][0]
    cut, _ = best_cuts(np.concatenate([train[0], logits]), np.concatenate([train[1], relevant]))
    assert joined["threshold"][0] == pytest.approx(cut[0])
    assert joined["recall"][0] * 3 == pytest.approx(round(joined["recall"][0] * 3))  # of 3 rows
    empty = calibrate(logits, relevant, calibration, 5, (logits[:0], relevant[:0]))
    assert np.array_equal(empty["threshold"], alone["threshold"])  # no train rows: as before
    assert np.array_equal(empty["own"], alone["own"])


def test_the_calibration_sample_is_every_train_row_up_to_its_size_then_a_seeded_sample():
    assert np.array_equal(calibration_sample(10, seed=0), np.arange(10))
    many = calibration_sample(CALIBRATION_TRAIN_ROWS + 5, seed=3)
    assert len(many) == CALIBRATION_TRAIN_ROWS and np.all(np.diff(many) > 0)
    assert np.array_equal(many, calibration_sample(CALIBRATION_TRAIN_ROWS + 5, seed=3))
    assert not np.array_equal(many, calibration_sample(CALIBRATION_TRAIN_ROWS + 5, seed=4))
