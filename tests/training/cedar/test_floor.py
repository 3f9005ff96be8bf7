"""The precision floor: which concepts a reader is shown, one entry per name, and the floor
picked on dev rows by explanation utility (training/cedar/floor.py)."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

from training.cedar.catalog import catalog_entry
from training.cedar.concepts import (
    DEFAULT_FLOOR,
    REFERENCE,
    ConceptCoder,
    display_floor,
    holds,
    merged_by_name,
)
from training.cedar.floor import (
    FloorRows,
    explanation_precision,
    floor_curve,
    pick_floor,
    shown_names,
    used_words,
)
from training.cedar.gallery_trust import AGREEMENT, ZERO_SHOT_AGREEMENT
from training.cedar.readout.artifact import readout_record, readout_tensors
from training.cedar.readout.vocabulary import VocabularyReadout
from training.core.errors import InputError
from training.synthetic import random_cedar_artifact

DIM, K = 16, 4


def entry(concept: int, precision: float | None, named: bool = True):
    return catalog_entry(
        {
            "concept": concept,
            "label": f"+{concept}",
            "name": f"n{concept}",
            "score": 0.5,
            "precision": precision,
            "named": named,
        }
    )


def test_a_concept_holds_when_named_and_its_precision_reaches_the_floor():
    assert holds(entry(0, 0.5), 0.5) and not holds(entry(0, 0.49), 0.5)
    assert not holds(entry(0, None), 0.1)  # not measured: not shown
    assert not holds(entry(0, 0.9, named=False), 0.5)  # its name is its label
    assert holds(entry(0, None, named=False), None)  # no floor: everything, as before


def test_the_floor_is_the_artifacts_else_the_default_where_precision_is_measured():
    measured, unmeasured = [entry(0, 0.2)], [entry(0, None)]
    assert display_floor({"value": 0.45}, measured) == 0.45
    assert display_floor({"value": None}, measured) is None  # recorded: no floor
    assert display_floor(None, measured) == DEFAULT_FLOOR
    assert display_floor(None, unmeasured) is None
    with pytest.raises(InputError, match="malformed floor"):
        display_floor({"value": "high"}, measured)


def test_one_name_once_its_values_summed_under_the_word_concept():
    # axes 0..31, word concepts from 32: the word "dog" (40) and the axis named dog (3)
    merged = merged_by_name([(3, 0.5), (5, 1.0), (40, 2.0)], ["dog", "snow", "Dog"], 32)
    assert merged == [(40, 2.5), (5, 1.0)]


def coder_with_words(floor: float | None) -> tuple[ConceptCoder, np.ndarray]:
    """A coder over a random rotation whose axes have precisions spread over [0, 1), axis 0
    named like word w0, and three words with precisions 0.9, 0.1 and none (zero-shot)."""
    rng = np.random.default_rng(4)
    sample = rng.normal(size=(60, DIM))
    artifact = random_cedar_artifact(DIM, K, sample, seed=2)
    for i, e in enumerate(artifact.extra["catalog"]):
        e["precision"] = (i * 7 % 32) / 32
    artifact.extra["catalog"][0]["name"] = "w0"
    words = VocabularyReadout(
        words=["w0", "w1", "w2"],
        classes=["noun"] * 3,
        weight=rng.normal(size=(3, DIM)).astype(np.float32),
        offset=np.full(3, 0.5, dtype=np.float32),  # active on most rows
        threshold=np.zeros(3, dtype=np.float32),
        own_threshold=np.ones(3, dtype=bool),
        precision=[0.9, 0.1, None],
        recall=[None] * 3,
        support=[3] * 3,
        zero_shot=[False, False, True],
    )
    artifact.extra["readout"] = readout_record(words)
    artifact.tensors = readout_tensors(words)
    artifact.extra["floor"] = {"value": floor}
    return ConceptCoder(artifact), sample.astype(np.float32)


def codes(coder: ConceptCoder, x: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    axes, values = coder.encode(x)
    return [
        (np.concatenate([w[0], a]), np.concatenate([w[1], v]))
        for w, a, v in zip(coder.active_words(x), axes, values, strict=True)
    ]


def test_a_coder_shows_only_what_holds_once_per_name():
    coder, x = coder_with_words(0.5)
    assert coder.floor == 0.5
    shown_any = False
    for ids, values in codes(coder, x):
        shown = coder.shown(ids, values)
        names = [coder.catalog[c].name.lower() for c, _ in shown]
        assert len(names) == len(set(names))
        for concept, _ in shown:
            assert coder.catalog[concept].precision >= 0.5
        shown_any |= bool(shown)
        assert "w1" not in names and "w2" not in names  # 0.1, and not measured
    assert shown_any
    everything = coder.at_floor(None)
    ids, values = codes(coder, x)[0]
    assert len(everything.shown(ids, values)) >= len(coder.shown(ids, values))
    assert coder.floor == 0.5  # at_floor leaves the coder as it was


def test_explanation_precision_counts_the_shown_names_the_other_captions_use():
    shown = [["dog", "snow"], ["dog"], []]
    used = [frozenset({"dog"}), frozenset({"cat"}), frozenset({"dog"})]
    figures = explanation_precision(shown, used)
    assert figures["explanation_precision"] == pytest.approx((0.5 + 0.0) / 2)
    assert figures["pooled_precision"] == pytest.approx(1 / 3)
    assert figures["rows_shown"] == pytest.approx(2 / 3)
    assert figures["utility"] == -1.0


def test_used_words_are_those_of_the_images_other_captions():
    texts = ["a dog runs", "a dog in snow", "a cat sleeps", "a red ball"]
    used = used_words(texts, ["a", "a", "b", "b"], others=1)
    assert "dog" in used[0] and "snow" in used[0] and "snow" not in used[1]
    assert "ball" in used[2] and "cat" not in used[2]


def test_the_floor_is_where_showing_a_concept_is_right_more_often_than_wrong():
    """Every row shows one concept of precision 0.6 its image's captions use and one of
    precision 0.2 they do not: the floor picked hides the second and keeps the first."""
    coder, _ = coder_with_words(None)
    good, bad = 2, 4  # two axes, their precisions rewritten
    coder.catalog[good] = dataclasses.replace(coder.catalog[good], precision=0.6, name="good")
    coder.catalog[bad] = dataclasses.replace(coder.catalog[bad], precision=0.2, name="bad")
    pair = (np.array([good, bad]), np.array([1.0, 2.0], dtype=np.float32))
    rows = FloorRows([pair] * 10, [frozenset({"good"})] * 10)
    curve = floor_curve(coder, rows)
    floor = pick_floor(curve)
    assert 0.2 < floor <= 0.6
    assert shown_names(coder.at_floor(floor), rows)[0] == ["good"]
    assert curve[floor]["explanation_precision"] == 1.0
    assert curve[0.0]["explanation_precision"] == 0.5


def test_an_axis_named_like_a_learnt_word_is_shown_only_where_that_word_is_active():
    coder, _ = coder_with_words(None)
    coder.artifact.extra["catalog"][2]["name"] = "w2"  # the zero-shot word's name
    coder = ConceptCoder(coder.artifact)
    word = coder.axis_concepts  # w0: learnt, and the name of axis 0
    other = next(c for c in range(3, coder.axis_concepts) if coder.catalog[c].named)
    alone = coder.shown(np.array([0, 2, other]), np.array([1.0, 0.75, 0.5]))
    assert [c for c, _ in alone] == [2, other]  # w0's filter rejects the row; w2 learnt nothing
    both = coder.shown(np.array([word, 0, other]), np.array([0.25, 1.0, 0.5]))
    assert both[0] == (word, pytest.approx(1.25)) and [c for c, _ in both] == [word, other]


def test_on_a_gallery_a_concept_is_also_held_to_its_agreement_there():
    """w0 (precision 0.9) holds by the artifact, w2 is zero-shot: on a gallery where w0 agrees
    too little it is hidden, and w2 is shown once its agreement reaches the zero-shot floor;
    an unmeasured agreement (NaN) leaves the artifact's rule."""
    coder, _ = coder_with_words(0.5)
    w0, w1, w2 = (coder.axis_concepts + w for w in range(3))
    assert coder.holds(w0) and not coder.holds(w1) and not coder.holds(w2)
    agreement_there = np.full(coder.concepts, np.nan, dtype=np.float32)
    assert coder.on_gallery(agreement_there).holds(w0)
    assert not coder.on_gallery(agreement_there).holds(w2)  # unmeasured: no evidence
    agreement_there[w0] = AGREEMENT / 2
    agreement_there[w2] = ZERO_SHOT_AGREEMENT
    on_it = coder.on_gallery(agreement_there)
    assert not on_it.holds(w0) and on_it.holds(w2) and not on_it.holds(w1)
    ids = np.array([w0, w2], dtype=np.int64)
    assert [c for c, _ in on_it.shown(ids, np.array([1.0, 0.5]))] == [w2]
    assert coder.on_gallery(None).holds(w0) and coder.holds(w0)  # the coder is left as it was
    with pytest.raises(InputError, match="agreement for 3 concepts"):
        coder.on_gallery(np.zeros(3))


def test_on_a_gallery_a_concept_whose_agreement_shifted_from_its_reference_is_hidden():
    """w0 holds by the artifact and agrees enough on the gallery; with the artifact's reference
    (it won on 90 of 100 training rows) it is hidden where it now wins on 10 of 100 gallery
    rows, kept where it wins on 80; the zero-shot w2 is not held to a reference. Without a
    reference or without the gallery's counts, no shift is read."""
    coder, _ = coder_with_words(0.5)
    w0, w2 = coder.axis_concepts, coder.axis_concepts + 2
    agreement_there = np.full(coder.concepts, np.nan, dtype=np.float32)
    agreement_there[[w0, w2]] = 0.5
    reference = np.zeros((coder.concepts, 2), dtype=np.int32)
    reference[[w0, w2]] = (90, 100)
    fell = np.zeros((coder.concepts, 2), dtype=np.int32)
    fell[[w0, w2]] = (10, 100)
    held = fell.copy()
    held[w0] = (80, 100)
    assert coder.on_gallery(agreement_there, fell).holds(w0)  # no reference in the artifact
    referenced = copy.copy(coder.artifact)
    referenced.tensors = {**coder.artifact.tensors, REFERENCE: reference}
    with_reference = ConceptCoder(referenced)
    assert with_reference.holds(w0)  # the artifact's rule alone
    assert not with_reference.on_gallery(agreement_there, fell).holds(w0)
    assert with_reference.on_gallery(agreement_there, fell).gallery_reason(w0) == (
        "its agreement fell from 0.90 on its training rows to 0.10 on this gallery"
    )
    assert with_reference.on_gallery(agreement_there, held).gallery_reason(w0) is None
    weak = agreement_there.copy()
    weak[[w0, w2]] = AGREEMENT / 2
    on_weak = with_reference.on_gallery(weak, held)
    assert "below 0.1" in on_weak.gallery_reason(w0)
    assert "zero-shot word" in on_weak.gallery_reason(w2)
    assert on_weak.gallery_reason(coder.axis_concepts + 1) is None  # hidden by the floor alone
    assert with_reference.on_gallery(agreement_there, fell).holds(w2)  # zero-shot: no shift
    assert with_reference.on_gallery(agreement_there, held).holds(w0)
    assert with_reference.on_gallery(agreement_there).holds(w0)  # no counts kept
    with pytest.raises(InputError, match="agreement counts for 3 concepts"):
        with_reference.on_gallery(agreement_there, np.zeros((3, 2)))


def test_a_phrase_says_only_a_concept_whose_agreement_fell_less_than_a_shown_ones_may():
    """w0 won on 90 of 100 training rows: on a gallery where it wins on 70 of 100 it is still
    shown (above 0.6 × its reference) but no longer said in a phrase (below 0.9 ×, even at its
    upper bound); where it wins on 88 it is both. Without a reference, shown is sayable."""
    coder, _ = coder_with_words(0.5)
    w0 = coder.axis_concepts
    agreement_there = np.full(coder.concepts, np.nan, dtype=np.float32)
    agreement_there[w0] = 0.5
    reference = np.zeros((coder.concepts, 2), dtype=np.int32)
    reference[w0] = (900, 1000)
    referenced = copy.copy(coder.artifact)
    referenced.tensors = {**coder.artifact.tensors, REFERENCE: reference}
    with_reference = ConceptCoder(referenced)
    counts = np.zeros((coder.concepts, 2), dtype=np.int32)
    counts[w0] = (700, 1000)
    fell = with_reference.on_gallery(agreement_there, counts)
    assert fell.holds(w0) and not fell.sayable(w0)
    counts[w0] = (880, 1000)
    kept = with_reference.on_gallery(agreement_there, counts)
    assert kept.holds(w0) and kept.sayable(w0)
    assert coder.on_gallery(agreement_there, counts).sayable(w0)


def test_each_concept_reads_the_word_of_its_name():
    """Axis 0 is named w0: it reads w0, as w0's word concept does; the words read themselves;
    an axis whose name is no readout word reads none."""
    coder, _ = coder_with_words(0.5)
    words = coder.name_words()
    a = coder.axis_concepts
    assert words[0] == 0 and words[a:].tolist() == [0, 1, 2]
    others = [c for c in range(1, a) if coder.catalog[c].name.lower() not in ("w0", "w1", "w2")]
    assert others and (words[others] == -1).all()
