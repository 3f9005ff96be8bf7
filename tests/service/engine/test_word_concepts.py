"""Word concepts (a vocabulary readout in the CEDAR artifact) served as the axis concepts are:
resolved by name, filtered through their postings, shown in the catalog and in Explain; and
only the concepts that hold (held-out precision at or above the artifact's floor, WORD_FLOOR)
shown, a filter on one below it answered with a warning.

The premise is built into the fixture (search_gallery.beacon_readout): the word BEACON is
active on exactly the BEACON_ROWS rows nearest the first row, whatever CEDAR learned."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from search_gallery import (
    BEACON,
    BEACON_PRECISION,
    BEACON_ROWS,
    LANTERN,
    UNNAMED_PRECISION,
    WORD_FLOOR,
    written_concepts,
)
from two_engines import ENGINES, either

from indexer.format.bundle import Bundle
from indexer.verify.check import verify_bundle
from service.engine.search import SearchEngine
from service.results import SearchQuery
from training.core.errors import InputError


@pytest.fixture(scope="module", params=ENGINES)
def words_engine(request: pytest.FixtureRequest, word_bundle: Path, minilm) -> SearchEngine:
    return either(request, SearchEngine(Bundle.open(word_bundle), minilm), "milvus_word_engine")


def beacon_rows(engine: SearchEngine) -> np.ndarray:
    """The rows of the word's postings."""
    return engine.bundle.postings(engine.coder.resolve(BEACON)[0])[0]


def test_a_word_resolves_to_its_own_concept_after_the_axes(words_engine: SearchEngine):
    coder = words_engine.coder
    [concept] = coder.resolve(BEACON)
    assert concept == coder.axis_concepts == 2 * words_engine.bundle.dim
    assert coder.concepts == coder.axis_concepts + 1
    entry = coder.catalog[concept]
    assert (entry.name, entry.label, entry.named, entry.precision) == (
        BEACON,
        BEACON,
        True,
        BEACON_PRECISION,
    )
    with pytest.raises(InputError, match="no concept is named"):
        coder.resolve("lanterns-of-nowhere")


def test_the_word_postings_hold_exactly_its_active_rows(words_engine: SearchEngine):
    rows = beacon_rows(words_engine)
    assert len(rows) == BEACON_ROWS and rows[0] == 0  # the first row is its own nearest
    assert (np.diff(rows) > 0).all()
    assert verify_bundle(words_engine.bundle.path).ok


def test_require_and_exclude_a_word(words_engine: SearchEngine):
    active = set(beacon_rows(words_engine).tolist())
    required = words_engine.search(SearchQuery.of("a dog on the beach", k=10, require=[BEACON]))
    assert required.hits and all(h.row in active for h in required.hits)
    excluded = words_engine.search(SearchQuery.of("a dog on the beach", k=10, exclude=[BEACON]))
    assert excluded.hits and not any(h.row in active for h in excluded.hits)


def test_explain_lists_the_word_first_on_a_row_it_is_active_on(words_engine: SearchEngine):
    rows = beacon_rows(words_engine)
    result = words_engine.search(
        SearchQuery.of("a dog on the beach", k=5, require=[BEACON], explain=True)
    )
    for hit in result.hits:
        assert hit.row in rows
        assert hit.concepts[0].name == BEACON  # word concepts come before the axes
    explanation = words_engine.explain(SearchQuery.of("a cat"), row=int(rows[0]))
    assert explanation.item_concepts[0].name == BEACON
    assert all(c.id < words_engine.coder.axis_concepts for c in explanation.item_concepts[1:])


def test_the_catalog_finds_the_word(words_engine: SearchEngine):
    [found] = words_engine.get_concept(BEACON)
    assert (found.name, found.precision) == (BEACON, BEACON_PRECISION)
    page = words_engine.list_concepts(name_contains=BEACON)
    assert [c.name for c in page.concepts] == [BEACON]


def test_only_concepts_that_hold_are_shown(words_engine: SearchEngine):
    coder = words_engine.coder
    rows = beacon_rows(words_engine)
    result = words_engine.search(SearchQuery.of("a dog on the beach", k=8, explain=True))
    explanation = words_engine.explain(SearchQuery.of("a dog on the beach"), row=int(rows[0]))
    listed = [*result.query_concepts, *explanation.query_concepts, *explanation.item_concepts]
    listed += [*explanation.shared_concepts]
    for hit in result.hits:
        listed += [*hit.concepts, *hit.shared_concepts]
        names = [c.name for c in hit.concepts]
        assert len(names) == len(set(names))
    assert listed
    for concept in listed:
        assert coder.holds(concept.id)
        assert coder.catalog[concept.id].precision >= WORD_FLOOR
    assert explanation.item_concepts[0].name == BEACON  # it holds: still shown, first


def test_the_catalog_lists_what_holds_and_marks_the_rest(words_engine: SearchEngine):
    coder = words_engine.coder
    held = words_engine.list_concepts(page_size=1000)
    assert {c.name for c in held.concepts} == {BEACON, LANTERN}
    assert not any(c.below_floor for c in held.concepts)
    everything = words_engine.list_concepts(page_size=1000, include_below_floor=True)
    assert everything.total_size == coder.concepts
    _, unnamed = written_concepts(coder.catalog)
    [found] = words_engine.get_concept(unnamed.label)
    assert found.below_floor and found.precision == UNNAMED_PRECISION


def test_a_filter_below_the_floor_runs_and_warns(words_engine: SearchEngine):
    _, unnamed = written_concepts(words_engine.coder.catalog)
    allowed = set(words_engine.bundle.postings(unnamed.concept)[0].tolist())
    result = words_engine.search(SearchQuery.of("a dog", k=5, require=[unnamed.label]))
    assert result.hits and all(h.row in allowed for h in result.hits)
    [warning] = result.warnings
    assert unnamed.label in warning and "below the precision floor 0.50" in warning
    assert words_engine.search(SearchQuery.of("a dog", k=5, require=[BEACON])).warnings == []
    excluded = words_engine.search(SearchQuery.of("a dog", k=5, exclude=[unnamed.label]))
    assert len(excluded.warnings) == 1 and "in exclude" in excluded.warnings[0]
