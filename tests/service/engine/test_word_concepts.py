"""Word concepts (a vocabulary readout in the CEDAR artifact) served as the axis concepts are:
resolved by name, filtered through their postings, shown in the catalog and in Explain.

The premise is built into the fixture (search_gallery.beacon_readout): the word BEACON is
active on exactly the BEACON_ROWS rows nearest the first row, whatever CEDAR learned."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from search_gallery import BEACON, BEACON_PRECISION, BEACON_ROWS

from indexer.format.bundle import Bundle
from indexer.verify.check import verify_bundle
from service.engine.search import SearchEngine
from service.results import SearchQuery
from training.core.errors import InputError


@pytest.fixture(scope="module")
def words_engine(word_bundle: Path, minilm) -> SearchEngine:
    return SearchEngine(Bundle.open(word_bundle), minilm)


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
