"""CEDAR naming by data and the concept-filter quality metric, on tiny synthetic cases."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy import sparse

from training.cedar.caption_words import caption_vocabulary, typo_targets
from training.cedar.catalog import (
    build_catalog,
    catalog_entry,
    catalog_json,
    name_by_data,
    signed_directions,
)
from training.cedar.concepts import ConceptCoder
from training.cedar.filter_quality import (
    filter_quality,
    frequent_words,
    named_filters,
    precision_at_top,
)
from training.cedar.naming import (
    Cooccurrence,
    DataName,
    choose_names,
    cooccurrence,
    naming_precision,
    pick_threshold,
    trusted,
    word_relevance,
)
from training.core.artifacts import TransformArtifact
from training.core.errors import InputError
from training.core.granularity import default_contract


def test_vocabulary_drops_stop_words_folds_verbs_and_merges_typos():
    texts = (
        ["a man runs in front of a field"] * 60
        + ["the man is running next to the glass", "a man run", "mans on a feild"]
        + ["a dog near grass"] * 60
    )
    vocab = caption_vocabulary(texts, min_count=2)
    words = dict(vocab.terms())
    assert "front" not in words and "next" not in words  # stop words
    assert words["running"] == "verb" and "runs" not in words and "run" not in words
    assert "mans" not in words and "feild" not in words  # merged into man, field
    # one substitution from "grass" is a word ("glass"), not a typo; a frequent token is none
    counts = Counter({"grass": 100, "glass": 1, "feild": 1, "field": 100, "fields": 40})
    assert typo_targets(counts, min_count=2) == {"feild": "field"}
    man = vocab.words.index("man")
    assert vocab.counts[man] == 60 + 3  # "mans" counted as "man"
    assert vocab.mentions("Mans on a feild.") == {man, vocab.words.index("field")}
    raw = dict(caption_vocabulary(texts, min_count=1, clean=False).terms())
    assert "mans" in raw and "front" in raw and "runs" in raw  # the naming before the clean-up


def test_relevance_is_judged_by_the_other_captions_only():
    # image a: the dog is in three captions; image b: in one
    mentions = [frozenset({0}), frozenset({0}), frozenset({0}), frozenset(), frozenset({0})]
    groups = ["a", "a", "a", "a", "b"]
    relevant = word_relevance(mentions, groups, n_words=1).toarray()[:, 0].astype(bool)
    # rows 0-2 see two other dog captions, row 3 sees three; row 4's only mention is its own
    assert relevant.tolist() == [True, True, True, True, False]
    single = word_relevance([frozenset({0}), frozenset()], ["x", "y"], 1).toarray()[:, 0]
    assert single.tolist() == [1.0, 0.0]  # one caption per group: its own caption


def stats(hits: list[list[float]], active: list[float], support: list[float], rows: int):
    return Cooccurrence(np.array(hits, float), np.array(active, float), np.array(support), rows)


def test_a_name_goes_to_one_concept_and_both_signs_only_when_opposite():
    # four concepts = two axes (+0, -0, +1, -1); words dog, cat, black
    cosines = np.ones((4, 3))
    train = stats(
        hits=[[40, 0, 2], [30, 0, 1], [0, 0, 30], [0, 25, 0]],
        active=[50, 50, 50, 50],
        support=[50, 50, 50],
        rows=200,
    )
    names = choose_names(cosines, train, signed=True, candidates=3)
    # +0 takes dog; -0 also wants dog but it is given, and its next word (black) is also +1's
    # best, which +1 takes first; -1 takes cat: axis 1's two signs share no word and each
    # name is rare on the other sign's rows, so both keep their names
    assert [n.word for n in names] == [0, None, 2, 1]
    # an axis whose signs look alike keeps one name
    alike = stats(hits=[[40, 30], [30, 35]], active=[50, 50], support=[60, 60], rows=100)
    pair = choose_names(np.ones((2, 2)), alike, signed=True, candidates=2)
    assert sum(n.word is not None for n in pair) == 1


def test_loose_names_are_left_unnamed_at_the_val_threshold():
    names = [DataName(0, 0, 0.8, 0.9), DataName(1, 1, 0.3, 0.2)]
    val = stats(hits=[[45, 0], [0, 10]], active=[50, 50], support=[60, 60], rows=100)
    threshold, curve = pick_threshold(names, val)
    # concept 0: precision 0.9 (worth 50 · 0.8); concept 1: 0.2 (worth 50 · -0.6)
    assert 0.2 < threshold <= 0.9 and curve[0.0] < curve[threshold]
    kept = trusted(names, threshold)
    assert [n.word for n in kept] == [0, None]


def test_naming_by_data_fills_the_catalog_and_the_coder_finds_unnamed_by_label():
    rng = np.random.default_rng(0)
    dim = 16
    rotation, mean = np.eye(dim), np.zeros(dim)
    words = ["dog", "cat", *(f"word{j}" for j in range(2, dim))]
    embeddings = np.eye(dim)  # word j lies along axis j
    x = rng.normal(size=(200, dim))
    active = np.where(x > 0, 2 * np.arange(dim), 2 * np.arange(dim) + 1)[:, :2]  # k = 2
    relevance = np.zeros((200, dim))
    relevance[:, 0] = x[:, 0] > 0  # "dog" is true where +0 fires
    relevance[:, 1] = rng.random(200) < 0.2  # "cat" is noise
    evidence = cooccurrence(active, sparse.csr_matrix(relevance), 2 * dim)
    names, info = name_by_data(
        signed_directions(rotation), mean, words, embeddings, evidence, evidence, signed=True
    )
    assert names[0].name == "dog" and names[0].named and names[0].precision == 1.0
    assert [n.name for n in names if n.named] == ["dog"]  # "cat" did not hold up
    assert names[2].name == "+1" and names[2].score == 0.0 and info["named"] == 1
    catalog = build_catalog(names, rotation, mean, 2, x, [str(i) for i in range(200)])
    artifact = TransformArtifact(
        method="cedar",
        rotation=rotation,
        mean=mean,
        contract=default_contract(dim),
        extra={"k": 2, "catalog": catalog_json(catalog)},
    )
    coder = ConceptCoder(artifact)
    assert coder.resolve("dog") == [0] and coder.resolve("+1") == [2]
    with pytest.raises(InputError, match="no concept is named"):
        coder.resolve("cat")
    # an old catalog entry (no precision, no named flag) still loads, named
    old = {k: v for k, v in catalog_json(catalog)[0].items() if k not in ("precision", "named")}
    assert catalog_entry(old).named and catalog_entry(old).precision is None


def test_filter_quality_on_a_tiny_case():
    relevant = np.array([[1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 0, 0]], dtype=bool)
    allowed = np.array([[1, 0, 1, 0], [0, 0, 1, 1], [0, 0, 0, 0]], dtype=bool)
    covered = np.array([True, True, False])
    result = filter_quality(allowed, covered, relevant, ["noun", "noun", "verb"])
    assert result["noun"]["precision"] == pytest.approx((0.5 + 1.0) / 2)
    assert result["noun"]["recall"] == pytest.approx((0.5 + 1.0) / 2)
    assert result["verb"]["precision"] == 0.0 and result["verb"]["covered"] == 0
    assert result["all"]["words"] == 3 and result["all"]["covered"] == 2
    assert result["all"]["precision_covered"] == pytest.approx(0.75)


def test_precision_at_ten_reads_the_first_ten_allowed_rows_of_the_neutral_order():
    rows = 30
    ranking = np.arange(rows)[::-1]  # the neutral query ranks the last row first
    relevant = np.zeros((3, rows), dtype=bool)
    relevant[0, 20:] = True  # word 0: relevant on the ten rows ranked first
    relevant[1, :] = True
    allowed = np.ones((3, rows), dtype=bool)
    allowed[1, 5:] = False  # word 1: five rows allowed, all relevant: 5 of 10
    allowed[2] = False  # word 2: nothing allowed
    top = precision_at_top(allowed, relevant, ranking)
    assert top.tolist() == [1.0, 0.5, 0.0]
    result = filter_quality(allowed, np.ones(3, dtype=bool), relevant, ["noun"] * 3, ranking)
    assert result["all"]["p_at_10"] == pytest.approx(0.5)
    assert "p_at_10" not in filter_quality(allowed, np.ones(3, bool), relevant, ["noun"] * 3)["all"]


def test_named_filters_and_naming_precision():
    fires = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=bool)
    allowed, covered = named_filters(fires, ["dog", "dog", None], ["dog", "cat"])
    assert allowed[0].tolist() == [True, True, True, False] and covered.tolist() == [True, False]
    active = np.array([[0], [1], [0], [2]])
    relevant = np.array([[1, 0], [0, 0], [1, 0], [0, 1]], dtype=float)
    test = cooccurrence(active, sparse.csr_matrix(relevant), 3)
    result = naming_precision(["dog", "dog", None], test, ["dog", "cat"])
    assert result["named"] == 2 and result["distinct_names"] == 1
    assert result["precision"] == pytest.approx((1.0 + 0.0) / 2)
    words = frequent_words(sparse.csr_matrix(relevant), ["noun", "verb"], min_relevant=2)
    assert words.tolist() == [0]
