"""Open vocabulary: a word or phrase the catalog lacks is filtered on as a zero-shot concept,
made from its text embedding through the readout's map, its cut μ + z·σ of its own scores on
the gallery (service/engine/open_vocabulary.py), made once and kept.

The premise is computed here from the bundle's own cache: the rows whose centred cosine with
the phrase reaches z standard deviations above its mean, z the cut at which the text direction
of the bundle's one learnt word (BEACON) agrees best with that word's own rows, whatever CEDAR
learned."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from search_gallery import BEACON, OPEN_Z
from two_engines import ENGINES, either

from indexer.format.bundle import Bundle
from indexer.vocabulary.gallery_directions import (
    centred_rows,
    corrected_direction,
    direction_scores,
    gallery_moments,
    recovered_norms,
    sampled_rows,
    sketch_padded,
)
from service.engine import open_vocabulary
from service.engine.filtering import open_phrase
from service.engine.open_vocabulary import OpenVocabulary, phrase_of
from service.engine.search import SearchEngine
from service.errors import NotFoundError, QueryError
from service.results import ConceptRef, SearchQuery
from training.cedar.data import load_split_rows
from training.cedar.gallery_cuts import (
    NULL_FDR,
    cut_in_standard_units,
    empirical_null,
    null_cut,
    standardised_cut,
    zero_shot_cuts,
)
from training.core.metrics import unit_rows
from training.core.rotations import random_rotation


@pytest.fixture(scope="module", params=ENGINES)
def open_engine(request: pytest.FixtureRequest, word_bundle: Path, minilm) -> SearchEngine:
    return either(request, SearchEngine(Bundle.open(word_bundle), minilm), "milvus_word_engine")


def cache_scores(engine: SearchEngine, word_bundle: Path, phrase: str) -> np.ndarray:
    """s = ⟨x̃, t̃⟩ of every row, from the cache's embeddings."""
    x = load_split_rows(word_bundle.parent / "cache").embeddings
    b = engine.coder.artifact.mean
    t = engine.encoder.encode_text([phrase])[0]
    return unit_rows(x - b) @ unit_rows((t - b)[None, :])[0]


def taught_premise(engine: SearchEngine, word_bundle: Path) -> float:
    """The z on a 0.05 grid whose cut of BEACON's text direction best agrees (F1) with
    BEACON's own rows (its postings): brute force, ties to the lower z."""
    scores = cache_scores(engine, word_bundle, BEACON)
    beacon = np.zeros(len(scores), dtype=bool)
    beacon[engine.bundle.postings(engine.coder.resolve(BEACON)[0])[0]] = True
    best, best_f1 = 0.0, -1.0
    for z in np.arange(0.0, 8.01, 0.05):
        allowed = scores >= scores.mean() + z * scores.std()
        f1 = 2 * (allowed & beacon).sum() / max(allowed.sum() + beacon.sum(), 1)
        if f1 > best_f1 + 1e-12:
            best, best_f1 = float(z), float(f1)
    return best


def hub_values(engine: SearchEngine, word_bundle: Path) -> np.ndarray:
    """Each row's hub value: the mean of its 10 best ⟨x̃, t̃_w⟩ over the readout's words; 0
    with fewer than 10 words."""
    x = load_split_rows(word_bundle.parent / "cache").embeddings
    b = engine.coder.artifact.mean
    assert engine.coder.readout is not None
    if len(engine.coder.readout.words) < 10:
        return np.zeros(len(x))
    t = engine.encoder.encode_text(list(engine.coder.readout.words))
    every = unit_rows(x - b) @ unit_rows(t - b).T
    return np.sort(every, axis=1)[:, -10:].mean(axis=1)


def expected_rows(engine: SearchEngine, word_bundle: Path, phrase: str) -> set[int]:
    """The premise, on c = s less the row's hub value, at the z BEACON teaches (on s)."""
    scores = cache_scores(engine, word_bundle, phrase) - hub_values(engine, word_bundle)
    return null_premise(scores, taught_premise(engine, word_bundle))


def null_premise(scores: np.ndarray, z: float) -> set[int]:
    """c ≥ μ + z·σ of the scores c, then the lowest such c at which the rows at or past it are
    at least 1/q times those a normal null expects there, the null centred on the median of
    c, its spread 1.4826 times the median absolute deviation."""
    past = np.flatnonzero(scores >= scores.mean() + z * scores.std())
    centre = np.median(scores)
    spread = stats.median_abs_deviation(scores, scale="normal")
    kept: set[int] = set()
    for k, row in enumerate(past[np.argsort(-scores[past])], start=1):
        if len(scores) * stats.norm.sf(scores[row], centre, spread) <= NULL_FDR * k:
            kept = {int(r) for r in past if scores[r] >= scores[row]}
    return kept


def test_a_phrase_is_one_to_three_words():
    assert phrase_of(" Fire  Hydrant ") == "fire hydrant"
    assert phrase_of("teddy bear toy") == "teddy bear toy"
    assert phrase_of("a teddy bear toy") is None
    assert phrase_of("+12") is None and phrase_of("12") is None and phrase_of("") is None


def test_the_rows_cosines_come_back_from_the_stored_prefix():
    """p = G(x − m)/‖x − m‖ gives back ⟨x̃, t̃⟩ with x̃ = (x − b)/‖x − b‖, for unit rows x."""
    rng = np.random.default_rng(5)
    d = 12
    x = unit_rows(rng.normal(size=(40, d)) + 0.5)
    m, b = x.mean(axis=0), x.mean(axis=0) + rng.normal(scale=0.05, size=d)
    g = random_rotation(d, 3).astype(np.float64)
    p = unit_rows(x - m) @ g.T
    direction = unit_rows(rng.normal(size=(1, d)))[0]
    n, distance = recovered_norms(
        p @ (g @ m), p @ (g @ (m - b)), float(m @ m), float((m - b) @ (m - b))
    )
    found = direction_scores(p @ (g @ direction), float((m - b) @ direction), n, distance)
    assert np.allclose(found, unit_rows(x - b) @ direction, atol=1e-5)
    assert np.allclose(centred_rows(p, g, m, b), unit_rows(x - b), atol=1e-5)


def test_a_cut_from_the_moments_is_the_scores_own():
    """μ + z·σ of ⟨x̃, t̃⟩ over the rows, from x̄ and mean(x̃ x̃ᵀ) alone, blocks or not."""
    rng = np.random.default_rng(2)
    x = unit_rows(rng.normal(size=(500, 16)) + 0.3)
    t = unit_rows(rng.normal(size=(1, 16)))[0]
    moments = gallery_moments([x[:200], x[200:]], rows=500)
    assert moments.cut(t, 2.5) == pytest.approx(standardised_cut(x @ t, 2.5), abs=1e-5)
    assert moments.expected(t, -2.0) == pytest.approx(500)  # every row passes a cut of −2


def test_every_row_is_sampled_up_to_the_limit_then_a_seeded_sorted_draw():
    assert np.array_equal(sampled_rows(10, 16), np.arange(10))
    drawn = sampled_rows(1000, 64)
    assert len(np.unique(drawn)) == 64 and np.all(np.diff(drawn) > 0) and drawn.max() < 1000
    assert np.array_equal(drawn, sampled_rows(1000, 64))


def test_a_cut_in_standard_units_goes_back_to_the_same_z():
    scores = np.random.default_rng(1).normal(0.2, 0.05, size=(500, 1))
    assert cut_in_standard_units(scores, standardised_cut(scores[:, 0], 1.7)) == pytest.approx(1.7)


def test_the_null_keeps_a_separated_cluster_and_few_of_the_bulk():
    """A bulk of 20,000 rows and 200 rows well past it: the null's cut keeps the cluster,
    and of the rows kept at most about q come from the bulk."""
    rng = np.random.default_rng(4)
    bulk, cluster = rng.normal(0.0, 1.0, 20_000), rng.normal(4.5, 0.3, 200)
    scores = np.concatenate([bulk, cluster])
    cut = null_cut(scores[scores >= 1.0], len(scores), empirical_null(scores))
    assert cut >= 1.0 and np.mean(cluster >= cut) > 0.9
    assert np.sum(bulk >= cut) <= 2 * NULL_FDR * np.sum(scores >= cut)


def test_the_null_only_raises_a_cut_and_may_keep_nothing():
    """The cut is one of the scores past the first cut, or +inf: on a bulk alone, past a low
    first cut, the rows kept are none or the very top."""
    rng = np.random.default_rng(6)
    scores = rng.normal(0.0, 1.0, 5_000)
    [cut] = zero_shot_cuts(scores[:, None], z=0.5)
    assert cut == np.inf or (cut >= standardised_cut(scores, 0.5) and np.sum(scores >= cut) <= 3)
    assert null_cut(np.array([]), 100, (0.0, 1.0)) == np.inf


def test_a_word_the_catalog_lacks_is_filtered_on_as_a_zero_shot_concept(
    open_engine: SearchEngine, word_bundle: Path
):
    """A phrase the scenes hold (yellow squares): the rows of the premise, and the null's raise
    bites (fewer rows than μ + z·σ alone keeps), so the test fails without it."""
    phrase = "a yellow square"
    wanted = expected_rows(open_engine, word_bundle, phrase)
    z = taught_premise(open_engine, word_bundle)
    assert open_engine.vocabulary.z == pytest.approx(z)
    assert open_engine.vocabulary.z != OPEN_Z  # the artifact's z is not what is used
    scores = cache_scores(open_engine, word_bundle, phrase)
    assert 0 < len(wanted) < np.sum(scores >= scores.mean() + z * scores.std())
    result = open_engine.search(SearchQuery.of("a shape", k=10, require=[phrase]))
    [made] = result.filter_concepts
    assert (made.reference, made.role, made.made) == (f"'{phrase}'", "require", "zero-shot")
    assert result.hits and all(h.row in wanted for h in result.hits)
    found = set(open_engine.vocabulary.concept(phrase).rows.materialise().tolist())
    assert len(found ^ wanted) <= max(2, len(wanted) // 50)  # stored vectors: float rounding
    assert result.warnings and "zero-shot" in result.warnings[0]


HUB_WORDS = ["dog", "car", "tree", "house", "music", "water", "food", "city", "beach", "sky"]
HUB_WORDS += ["book", "phone"]


def test_a_phrase_is_cut_on_its_scores_less_each_rows_hubness(word_bundle: Path, minilm):
    """With a readout of 12 words (none taught: the artifact's z), a phrase's rows are the
    premise on s less each row's hub value (the mean of its 10 best scores over the 12 words),
    not the premise on s itself: the test fails without the correction."""
    bundle = Bundle.open(word_bundle)  # its own coder: the readout changed here only
    readout = bundle.coder.readout
    assert readout is not None
    words = len(HUB_WORDS)
    bundle.coder.readout = dataclasses.replace(
        readout,
        words=HUB_WORDS,
        classes=["noun"] * words,
        weight=np.repeat(readout.weight[:1], words, axis=0),
        offset=np.repeat(readout.offset[:1], words),
        threshold=np.repeat(readout.threshold[:1], words),
        own_threshold=np.ones(words, dtype=bool),
        precision=[None] * words,
        recall=[None] * words,
        support=[0] * words,
        frequency=[0.0] * words,
        zero_shot=None,
    )
    engine = SearchEngine(bundle, minilm)
    assert engine.vocabulary is not None and engine.vocabulary.z == OPEN_Z
    phrase = "yellow"
    scores = cache_scores(engine, word_bundle, phrase)
    hubs = hub_values(engine, word_bundle)
    assert hubs.std() > 0
    wanted = null_premise(scores - hubs, OPEN_Z)
    uncorrected = null_premise(scores, OPEN_Z)
    found = set(engine.vocabulary.concept(phrase).rows.materialise().tolist())
    assert wanted and len(found ^ wanted) <= max(2, len(wanted) // 50)
    assert len(wanted ^ uncorrected) > max(2, len(wanted) // 50) * 2


def test_a_phrase_whose_null_keeps_no_row_allows_none(
    word_bundle: Path, minilm, monkeypatch: pytest.MonkeyPatch
):
    """Where no score passes the null (its cut +inf), the phrase allows no row: required, the
    answer has no hits; excluded, it removes nothing."""
    monkeypatch.setattr(open_vocabulary, "null_cut", lambda *_args, **_kw: np.inf)
    engine = SearchEngine(Bundle.open(word_bundle), minilm)
    made = engine.vocabulary.concept("giraffe")
    assert made.cut == np.inf and made.rows.count == 0
    required = engine.search(SearchQuery.of("an animal", k=5, require=["giraffe"]))
    assert required.filtered_rows == 0 and not required.hits
    excluded = engine.search(SearchQuery.of("an animal", k=5, exclude=["giraffe"]))
    unfiltered = engine.search(SearchQuery.of("an animal", k=5))
    assert [h.row for h in excluded.hits] == [h.row for h in unfiltered.hits]


def test_a_phrase_is_made_once_then_looked_up(open_engine: SearchEngine):
    vocabulary = open_engine.vocabulary
    first = open_engine.search(SearchQuery.of("people", k=5, require=["fire hydrant"]))
    made = vocabulary.concept("fire hydrant")
    assert vocabulary.kept("fire hydrant")
    again = open_engine.search(SearchQuery.of("people", k=5, require=["Fire Hydrant"]))
    assert vocabulary.concept("fire hydrant") is made  # kept: no second scan
    assert again.filtered_rows == first.filtered_rows == made.rows.count


def test_exclude_a_phrase_and_a_learnt_word_keeps_its_row(open_engine: SearchEngine):
    banned = set(open_engine.vocabulary.concept("teddy bear").rows.materialise().tolist())
    result = open_engine.search(SearchQuery.of("a dog", k=10, exclude=["teddy bear"]))
    assert result.hits and not any(h.row in banned for h in result.hits)
    learnt = open_engine.search(SearchQuery.of("a dog", k=5, require=[BEACON]))
    assert [f.made for f in learnt.filter_concepts] == ["learnt"]
    beacon = open_engine.coder.resolve(BEACON)[0]
    assert learnt.filtered_rows == len(open_engine.bundle.postings(beacon)[0])


def test_four_words_are_no_concept(open_engine: SearchEngine):
    with pytest.raises(QueryError, match="unknown concept"):
        open_engine.search(SearchQuery.of("a dog", k=5, require=["a big red fire hydrant"]))


def test_a_phrase_is_looked_up_as_its_zero_shot_concept(open_engine: SearchEngine):
    [found] = open_engine.get_concept("Teddy Bear")
    made = open_engine.vocabulary.concept("teddy bear")
    assert (found.id, found.name, found.precision) == (-1, "teddy bear", None)
    assert found.zero_shot
    assert found.active_rows == made.rows.count and found.below_floor
    with pytest.raises(NotFoundError, match="no concept is named"):
        open_engine.get_concept("a big red fire hydrant")


def test_without_teachers_the_artifacts_z_is_used(word_bundle: Path, minilm):
    bundle = Bundle.open(word_bundle)  # its own coder: the readout changed here only
    assert bundle.coder.readout is not None
    bundle.coder.readout.precision = [None] * len(bundle.coder.readout.words)  # no teacher
    assert OpenVocabulary(bundle, minilm.encode_text).z == OPEN_Z


def test_without_teachers_a_recorded_z_nor_zero_shot_words_a_phrase_is_refused(
    word_bundle: Path, minilm
):
    bundle = Bundle.open(word_bundle)  # its own coder: the record changed here only
    assert bundle.coder.readout is not None
    bundle.coder.readout.precision = [None] * len(bundle.coder.readout.words)
    bundle.coder.artifact.extra["readout"]["training"].pop("zero_shot_z")
    vocabulary = OpenVocabulary(bundle, minilm.encode_text)
    with pytest.raises(QueryError, match="no zero-shot words"):
        vocabulary.concept("giraffe")


def test_a_readout_zero_shot_word_is_cut_on_the_gallery_like_any_phrase(word_bundle: Path, minilm):
    """A word the readout holds without labels (its training corpus's cosine cut τ) is made by
    the open vocabulary, its cut taught on this gallery; a learnt word keeps its row."""
    bundle = Bundle.open(word_bundle)  # its own coder: the catalog changed here only
    vocabulary = OpenVocabulary(bundle, minilm.encode_text)
    coder = bundle.coder
    [beacon] = coder.named(BEACON)
    assert open_phrase(bundle, ConceptRef(name=BEACON), "any", vocabulary) is None  # learnt
    coder.catalog[beacon] = dataclasses.replace(coder.catalog[beacon], zero_shot=True)
    assert open_phrase(bundle, ConceptRef(name=BEACON), "any", vocabulary) == BEACON
    assert open_phrase(bundle, ConceptRef(name=BEACON), "local", vocabulary) is None
    assert open_phrase(bundle, ConceptRef(name=BEACON), "any", None) is None


def scanned_rows(vocabulary: OpenVocabulary, phrase: str, cut: float) -> set[int]:
    direction = vocabulary.directions(vocabulary.embed([phrase]))[0]
    return set(np.flatnonzero(vocabulary.corrected_scores(direction) >= cut).tolist())


def test_past_the_scan_limit_a_phrase_is_searched_in_the_sketch(
    word_bundle: Path, minilm, monkeypatch: pytest.MonkeyPatch
):
    """The first phrase scans and starts the sketch; once it is built, a phrase is searched
    for there, and, asked for more candidates than the gallery holds, the search scores every
    row exactly: the scan's rows."""
    monkeypatch.setattr(open_vocabulary, "SEARCH_SHARE", 1)  # a search may score every row
    vocabulary = OpenVocabulary(Bundle.open(word_bundle), minilm.encode_text, scan_rows=0)
    assert vocabulary.searches
    first = vocabulary.concept("giraffe")
    assert set(first.rows.materialise().tolist()) == scanned_rows(vocabulary, "giraffe", first.cut)
    vocabulary.sketch_in_background().join()  # the thread the first phrase started
    assert vocabulary.sketch() is not None
    made = vocabulary.concept("teddy bear")
    assert made.found == "search"
    assert set(made.rows.materialise().tolist()) == scanned_rows(vocabulary, "teddy bear", made.cut)


def test_a_narrow_search_keeps_only_rows_past_the_cut(
    word_bundle: Path, minilm, monkeypatch: pytest.MonkeyPatch
):
    """A few candidates at a time: whatever the sketch ranks, a row is kept only when its
    exact score passes the cut, and every passing row of the first candidates scored is kept."""
    monkeypatch.setattr(open_vocabulary, "SEARCH_WIDTH", 16)
    monkeypatch.setattr(open_vocabulary, "SEARCH_MIN", 4)
    bundle = Bundle.open(word_bundle)
    vocabulary = OpenVocabulary(bundle, minilm.encode_text, scan_rows=0)
    state, sketch = vocabulary.prepare(), vocabulary.sketch()
    direction = vocabulary.directions(vocabulary.embed(["giraffe"]))[0]
    cut = state.moments.cut(corrected_direction(direction), state.z)
    searched = vocabulary.searched(sketch, direction, cut, 0.0, bundle.rows)
    assert searched is not None
    found, scores = searched
    every = vocabulary.corrected_scores(direction)
    passing = set(np.flatnonzero(every >= cut).tolist())
    assert set(found.tolist()) <= passing
    assert np.allclose(scores, every[found])  # each kept row with its exact score
    _, first = sketch.search(sketch_padded(corrected_direction(direction)[None, :]), 4)
    assert passing & set(first[0].tolist()) <= set(found.tolist())


def test_a_small_gallery_has_no_sketch(word_bundle: Path, minilm):
    vocabulary = OpenVocabulary(Bundle.open(word_bundle), minilm.encode_text)
    assert not vocabulary.searches and vocabulary.sketch() is None
    assert vocabulary.concept("giraffe").found == "scan"


def test_a_typo_of_a_name_allowing_no_row_is_answered_with_the_name(
    word_bundle: Path, minilm, monkeypatch: pytest.MonkeyPatch
):
    """A zero-shot phrase that allows no row (the null's cut +inf) and is a near miss of a
    catalog name warns "did you mean"; a phrase near no name keeps the floor's warning."""
    monkeypatch.setattr(open_vocabulary, "null_cut", lambda *_args, **_kw: np.inf)
    engine = SearchEngine(Bundle.open(word_bundle), minilm)
    typo = engine.search(SearchQuery.of("a shape", k=5, require=[BEACON[:-2] + BEACON[:-3:-1]]))
    assert typo.filtered_rows == 0 and not typo.hits
    [warning] = typo.warnings
    assert "allows 0 of" in warning and f"did you mean: {BEACON} (" in warning
    far = engine.search(SearchQuery.of("a shape", k=5, require=["zzyzx"]))
    assert far.filtered_rows == 0 and all("did you mean" not in w for w in far.warnings)
    # a real word spelt like the name (a word of the caption lexicon) was meant: no typo
    real = "bacon"
    assert real in open_vocabulary.known_words() and real != BEACON
    meant = engine.search(SearchQuery.of("a shape", k=5, require=[real]))
    assert meant.filtered_rows == 0 and all("did you mean" not in w for w in meant.warnings)
