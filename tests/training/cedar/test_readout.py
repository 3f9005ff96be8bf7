"""The vocabulary readout's mathematics and its place in the CEDAR artifact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from indexer.format.codes import code_run
from indexer.format.postings import entries_of_rows, postings_faults
from training.cedar.caption_words import caption_vocabulary
from training.cedar.concepts import ConceptCoder
from training.cedar.gallery_cuts import (
    HUB_BLOCK,
    agreeing_z,
    hub_scores,
    hub_words,
    zero_shot_cuts,
)
from training.cedar.readout.artifact import readout_of, readout_record, readout_tensors
from training.cedar.readout.quality import (
    gallery_shift,
    served_quality,
    served_z,
    with_global_threshold,
    word_margins,
)
from training.cedar.readout.rows import zero_shot_terms
from training.cedar.readout.vocabulary import (
    VocabularyReadout,
    calibration_words,
    margins,
    teacher_words,
    text_directions,
    with_zero_shot,
)
from training.core.artifacts import TransformArtifact
from training.core.errors import InputError
from training.core.metrics import unit_rows
from training.synthetic import random_cedar_artifact


def no_encoder(words: list[str]) -> np.ndarray:
    raise AssertionError(f"no text should be embedded here, asked for {words}")


def taught_readout(
    cedar: TransformArtifact, x: np.ndarray, z: float, rng: np.random.Generator
) -> tuple[VocabularyReadout, dict[str, np.ndarray]]:
    """Premise: three learnt words whose filters on rows x are their own text directions cut
    at μ + z·σ (weight t̃, offset −(μ + z·σ)), and the text embeddings (b + t̃) that give those
    directions back."""
    directions = unit_rows(rng.normal(size=(3, x.shape[1])))
    scores = unit_rows(x - cedar.mean) @ directions.T
    taught = readout(x.shape[1], 3, rng)
    taught.weight = directions.astype(np.float32)
    taught.offset = -(scores.mean(0) + z * scores.std(0)).astype(np.float32)
    taught.precision = [0.9, 0.8, 0.7]
    return taught, {w: cedar.mean + d for w, d in zip(taught.words, directions, strict=True)}


def readout(dim: int, words: int, rng: np.random.Generator) -> VocabularyReadout:
    return VocabularyReadout(
        words=[f"w{i}" for i in range(words)],
        classes=["noun"] * words,
        weight=rng.normal(size=(words, dim)).astype(np.float32),
        offset=np.full(words, -1.0, dtype=np.float32),
        threshold=np.zeros(words, dtype=np.float32),
        own_threshold=np.ones(words, dtype=bool),
        precision=[0.5] * words,
        recall=[None] * words,
        support=[3] * words,
        frequency=[0.1] * words,
    )


def test_the_readout_travels_in_the_artifact_and_old_artifacts_have_none(tmp_path: Path):
    rng = np.random.default_rng(2)
    base = random_cedar_artifact(16, 4, np.random.default_rng(9).normal(size=(50, 16)), seed=0)
    assert ConceptCoder(base).readout is None and ConceptCoder(base).concepts == 32
    learnt = readout(16, 3, rng)
    base.extra["readout"] = readout_record(learnt)
    base.tensors = readout_tensors(learnt)
    base.save(tmp_path / "cedar")
    coder = ConceptCoder(TransformArtifact.load(tmp_path / "cedar"))
    assert coder.concepts == 32 + 3 and coder.resolve("w1") == [33]
    x = rng.normal(size=(5, 16)).astype(np.float32)
    assert np.array_equal(
        coder.word_margins(x),
        margins(
            (x - base.mean) / np.linalg.norm(x - base.mean, axis=1, keepdims=True),
            learnt.weight,
            learnt.offset,
        ),
    )
    with pytest.raises(InputError, match="lacks its tensors"):
        readout_of(base.extra["readout"], {})


def test_word_entries_follow_the_axes_and_pass_verification():
    rng = np.random.default_rng(3)
    cedar = random_cedar_artifact(16, 4, np.random.default_rng(8).normal(size=(50, 16)), seed=1)
    learnt = readout(16, 4, rng)
    cedar.extra["readout"], cedar.tensors = readout_record(learnt), readout_tensors(learnt)
    coder = ConceptCoder(cedar)
    x = rng.normal(size=(300, 16)).astype(np.float32)
    run = code_run(x, cedar.rotation, cedar.mean, coder.k, 0, batch=64, words=coder.word_margins)
    assert len(run.counts) == 36
    indptr = np.concatenate([[0], np.cumsum(run.counts)])
    active = coder.word_margins(x) >= 0
    assert run.counts[32:].tolist() == active.sum(axis=0).tolist()
    for w in range(4):
        assert (
            run.rows[indptr[32 + w] : indptr[33 + w]].tolist()
            == np.flatnonzero(active[:, w]).tolist()
        )
    assert postings_faults(indptr, run.rows, run.values, 300, coder.k, 32) == []
    wanted = np.array([3, 150, 299])
    rows, concepts, _ = entries_of_rows(indptr, run.rows, run.values, 32, wanted)
    found = sorted(zip(rows.tolist(), concepts.tolist(), strict=True))
    expected = sorted((int(r), 32 + int(w)) for r in wanted for w in np.flatnonzero(active[r]))
    assert found == expected
    assert postings_faults(indptr, run.rows, run.values, 300, coder.k)  # all as axes: faults


def test_a_zero_shot_word_is_the_cosine_filter_of_its_text_direction(tmp_path: Path):
    rng = np.random.default_rng(4)
    base = random_cedar_artifact(16, 4, rng.normal(size=(50, 16)), seed=0)
    learnt = readout(16, 2, rng)
    texts = rng.normal(size=(2, 16)).astype(np.float32)
    grown = with_zero_shot(
        learnt, ["fox", "donkey"], ["noun", "noun"], text_directions(texts, base.mean), 0.3
    )
    base.extra["readout"] = readout_record(grown)
    base.tensors = readout_tensors(grown)
    base.save(tmp_path / "cedar")
    coder = ConceptCoder(TransformArtifact.load(tmp_path / "cedar"))
    x = rng.normal(size=(40, 16)).astype(np.float32)
    cosine = unit_rows(x - base.mean) @ unit_rows(texts - base.mean).T
    found = coder.word_margins(x)
    assert np.allclose(found[:, 2:], cosine - 0.3, atol=1e-5)  # active exactly where cos ≥ τ
    assert np.array_equal(
        found[:, :2], margins(unit_rows(x - base.mean), learnt.weight, learnt.offset)
    )
    fox = coder.catalog[coder.resolve("fox")[0]]
    assert fox.zero_shot and fox.precision is None
    assert not coder.catalog[coder.resolve("w0")[0]].zero_shot
    with pytest.raises(InputError, match="already learnt"):
        with_zero_shot(grown, ["fox"], ["noun"], texts[:1], 0.3)
    # one global θ moves the learnt words only: a zero-shot word stays on its cosine scale
    moved = with_global_threshold(grown, 2.0)
    assert np.array_equal(moved.offset[2:], grown.offset[2:])
    assert not np.array_equal(moved.offset[:2], grown.offset[:2])


def test_zero_shot_terms_are_the_words_the_readout_could_not_learn():
    texts = ["a puppy runs"] * 50 + ["a puppy sits on grass", "a fox", "a pupy"]
    trained = caption_vocabulary(texts, min_count=3)
    assert set(trained.words) == {"puppy", "running"}
    terms = dict(zero_shot_terms(texts, trained))
    assert "fox" in terms and "grass" in terms and "sitting" in terms  # rare in the captions
    assert "donkey" in terms  # never in them: the caption lexicon's word
    assert not {"puppy", "running", "pupy"} & set(terms)  # learnt, or a typo merged into one


def test_a_gallery_shift_moves_every_threshold_to_where_the_gallery_labels_say():
    """The premise built in: on this gallery a word is relevant wherever its margin is ≥ −1.5,
    so thresholds cut at 0 miss rows, and one shift picked on labelled val rows finds them."""
    rng = np.random.default_rng(5)
    cedar = random_cedar_artifact(16, 4, rng.normal(size=(50, 16)), seed=2)
    learnt = readout(16, 3, rng)
    words = ["w0", "w1", "w2", "absent"]
    val_x, test_x = (rng.normal(size=(400, 16)).astype(np.float32) for _ in range(2))
    val_margins, covered = word_margins(learnt, cedar, val_x, words)
    test_margins, _ = word_margins(learnt, cedar, test_x, words)
    assert covered.tolist() == [True, True, True, False]
    assert np.isneginf(test_margins[3]).all()
    val_wanted, test_wanted = val_margins >= -1.5, test_margins >= -1.5
    val_wanted[3] = test_wanted[3] = rng.random(400) < 0.3
    shift, quality = gallery_shift(
        learnt, cedar, (val_x, words, val_wanted), (test_x, words, ["noun"] * 4, test_wanted)
    )
    assert -1.6 < shift <= -1.4
    assert quality["all"]["covered"] == 3
    assert quality["noun"]["recall_covered"] > 0.98 and quality["noun"]["precision_covered"] > 0.98
    at_zero = (test_margins[:3] >= 0).sum() / test_wanted[:3].sum()
    assert at_zero < 0.9  # the thresholds as trained miss what the gallery calls relevant


def test_the_served_filter_reads_the_learnt_row_and_standardises_the_rest():
    """Premise built in: the learnt word's relevant rows are those its margin allows, the other
    word's those at μ + z·σ of its own scores raised to its null's cut (z as the artifact
    records it, the learnt word teaching nothing: no held-out precision): served, both filters
    are exact."""
    rng = np.random.default_rng(6)
    cedar = random_cedar_artifact(16, 4, rng.normal(size=(50, 16)), seed=1)
    learnt = readout(16, 1, rng)
    learnt.precision = [None]
    cedar.extra["readout"] = {**readout_record(learnt), "training": {"zero_shot_z": 1.0}}
    cedar.tensors = readout_tensors(learnt)
    direction = unit_rows(rng.normal(size=(1, 16)))
    x = rng.normal(size=(400, 16)).astype(np.float32)
    x[:40] += 16 * direction[0].astype(np.float32)  # the other word's rows
    features = unit_rows(x - cedar.mean)
    other = (features @ direction.T)[:, 0]
    [cut] = zero_shot_cuts(other[:, None], 1.0)
    assert other.mean() + other.std() < cut < np.inf  # the null raises μ + σ, and keeps rows
    wanted = np.stack([word_margins(learnt, cedar, x, ["w0"])[0][0] >= 0, other >= cut])
    found = served_quality(
        learnt,
        cedar,
        x,
        ["w0", "other"],
        ["noun", "noun"],
        wanted,
        np.concatenate([np.zeros((1, 16)), direction]),
        no_encoder,
    )
    served = next(iter(found.values()))  # every word, as served
    assert served["all"]["precision"] == served["all"]["recall"] == 1.0
    assert calibration_words(learnt)[0].size == 0  # no zero-shot words to measure z from


def test_a_rows_hub_value_is_the_mean_of_its_best_scores_over_the_words():
    """Across blocks: the mean of each row's 10 best of 30 words' scores; with fewer words
    than that, no hubness (0)."""
    rng = np.random.default_rng(3)
    rows = unit_rows(rng.normal(size=(HUB_BLOCK + 7, 8))).astype(np.float32)
    words = unit_rows(rng.normal(size=(30, 8))).astype(np.float32)
    best = np.sort(rows @ words.T, axis=1)[:, -10:].mean(axis=1)
    assert np.allclose(hub_scores(rows, words, 10), best, atol=1e-6)
    assert not hub_scores(rows, words[:9], 10).any()


def test_hubness_is_read_over_the_words_most_often_active_in_training():
    words = [f"w{j}" for j in range(12)]
    frequency = [0.1, 0.5, 0.0, 0.5, 0.3, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.9]
    assert hub_words(words, frequency, most=4, least=10) == ["w1", "w3", "w4", "w11"]
    assert hub_words(words, None, most=3, least=10) == ["w0", "w1", "w2"]
    assert hub_words(words[:9], frequency[:9], most=4, least=10) == []


def test_the_learnt_words_teach_a_gallery_its_zero_shot_cut():
    """Premise built in: on this gallery the learnt words' filters are their text directions
    cut at z = 2.5 (whatever z the artifact recorded): the taught z is 2.5, and a zero-shot
    word whose relevant rows stand there (raised to its null's cut) is served exactly."""
    rng = np.random.default_rng(11)
    cedar = random_cedar_artifact(16, 4, rng.normal(size=(50, 16)), seed=2)
    x = rng.normal(size=(3000, 16)).astype(np.float32)
    direction = unit_rows(np.random.default_rng(12).normal(size=(1, 16)))
    x[:100] += 8 * direction[0].astype(np.float32)  # the zero-shot word's rows
    taught, texts = taught_readout(cedar, x, 2.5, rng)
    cedar.extra["readout"] = {**readout_record(taught), "training": {"zero_shot_z": 0.5}}
    cedar.tensors = readout_tensors(taught)
    asked: list[list[str]] = []

    def embed(words: list[str]) -> np.ndarray:
        asked.append(list(words))
        return np.stack([texts[w] for w in words])

    assert served_z(taught, cedar, x, embed) == pytest.approx(2.5, abs=0.05)
    assert asked == [["w0", "w1", "w2"]]  # by held-out precision
    other = (unit_rows(x - cedar.mean) @ direction.T)[:, 0]
    wanted = (other >= zero_shot_cuts(other[:, None], 2.5)[0])[None, :]
    assert wanted.sum() >= 50
    found = served_quality(taught, cedar, x, ["other"], ["noun"], wanted, direction, embed)
    served = next(iter(found.values()))
    assert served["all"]["f1"] > 0.95


def test_teachers_are_learnt_words_with_a_usable_share_of_the_rows():
    rng = np.random.default_rng(3)
    words = readout(8, 5, rng)
    words.precision = [0.9, None, 0.5, 0.7, 0.8]
    counts = np.array([50, 50, 9, 500, 40])  # w2 too rare, w3 on more than half of 800 rows
    assert teacher_words(words, counts, 800).tolist() == [0, 4]
    assert teacher_words(words, counts, 800, most=1).tolist() == [0]
    assert agreeing_z(np.zeros((10, 0)), np.zeros((10, 0), dtype=bool)) is None
