"""Gallery trust at build and its query gate, on a text bundle whose readout holds zero-shot
words (search_gallery.build_text_bundle's `zero_shot_words`: caption words with their text
directions and no labels).

What holds for any correct build: the version keeps each concept's agreement (in [0, 1], NaN
where unmeasured) and shows a concept only where it agrees; a row's stored zero-shot entries
are the words its gate keeps; and a query equal to a row's embedding keeps, through the query
gate, the zero-shot words its row kept: read from the row's stored vector, as the build read it,
the same words up to the recovery's float error."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pytest
from search_gallery import build_text_bundle, described_rows, described_word

from indexer.format.bundle import GALLERY_AGREEMENT_COUNTS, Bundle
from indexer.verify.check import verify_bundle
from indexer.vocabulary.query_gate import QueryGate
from service.engine.explain import (
    item_prefixes,
    query_words,
    row_words,
    stored_embedding,
    version_gate,
)
from service.engine.search import SearchEngine
from service.results import SearchQuery
from training.cedar.gallery_trust import AGREEMENT, MIN_ROWS, ZERO_SHOT_AGREEMENT
from training.core.cache import EmbeddingCache
from training.corpora.compositional import ATTRIBUTES, PLACES, RELATIONS, SUBJECTS, THINGS

# every content word of the scenes' captions, so that the described word is a readout word
ZERO_SHOT_WORDS = sorted(
    {
        word
        for phrase in (*SUBJECTS, *THINGS, *ATTRIBUTES, *RELATIONS, *PLACES)
        for word in phrase.split()
        if word not in {"on", "the", "in", "a", "by", "to", "at", "over", "under", "next"}
    }
)


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory, minilm) -> Path:
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return build_text_bundle(
            tmp_path_factory.mktemp("gated-bundle"),
            minilm,
            words=True,
            text=True,
            zero_shot_words=ZERO_SHOT_WORDS,
        )
    finally:
        faiss.omp_set_num_threads(before)


def zero_shot_ids(bundle: Bundle) -> set[int]:
    coder = bundle.coder
    return {c for c in range(coder.axis_concepts, coder.concepts) if coder.catalog[c].zero_shot}


def test_the_version_keeps_each_concepts_agreement_and_shows_what_agrees(gated: Path):
    bundle = Bundle.open(gated)
    verify_bundle(bundle.path)
    agreement = bundle.gallery_agreement()
    coder = bundle.coder
    assert agreement is not None and agreement.shape == (coder.concepts,)
    measured = ~np.isnan(agreement)
    assert measured.any() and ((agreement[measured] >= 0) & (agreement[measured] <= 1)).all()
    words = sorted(zero_shot_ids(bundle))
    assert len(words) == len(ZERO_SHOT_WORDS)
    for c in words:  # a zero-shot word is shown only where it agrees enough
        assert coder.holds(c) == bool(measured[c] and agreement[c] >= ZERO_SHOT_AGREEMENT)
    for c in range(coder.axis_concepts):
        if measured[c] and agreement[c] < AGREEMENT:
            assert not coder.holds(c)
    # and its counts (won, active) with the contest on the corrected scores: on the same
    # active rows as the agreement, so measured exactly where those reach MIN_ROWS
    counts = bundle.gallery_agreement(GALLERY_AGREEMENT_COUNTS)
    assert counts is not None and counts.shape == (coder.concepts, 2)
    assert ((counts[:, 0] >= 0) & (counts[:, 0] <= counts[:, 1])).all()
    assert np.array_equal(measured, counts[:, 1] >= MIN_ROWS)


def test_a_query_keeps_the_zero_shot_words_its_row_kept(gated: Path):
    bundle = Bundle.open(gated)
    gate = QueryGate.of(bundle)
    assert gate is not None
    x = np.asarray(EmbeddingCache.open(gated.parent / "cache").embeddings("text"), np.float32)
    rows = np.arange(0, bundle.rows, 3)
    zero_shot = zero_shot_ids(bundle)
    stored = [set(ids.tolist()) & zero_shot for ids, _ in row_words(bundle, rows)]
    active = [set(ids.tolist()) & zero_shot for ids, _ in bundle.coder.active_words(x[rows])]
    kept = [set(ids.tolist()) & zero_shot for ids, _ in query_words(bundle, x[rows])]
    assert all(k <= a for k, a in zip(kept, active, strict=True))
    refused = sum(len(a - k) for a, k in zip(active, kept, strict=True))
    assert refused > 0 and sum(map(len, kept)) > 0  # the gate bites, and keeps some
    # the row's own vector, as the version stores it (the build gated that one), read as a query
    own = np.stack(
        [stored_embedding(bundle, item_prefixes(bundle, int(r))[bundle.dim]) for r in rows]
    )
    kept_own = [set(ids.tolist()) & zero_shot for ids, _ in query_words(bundle, own)]
    differ = sum(len(s ^ k) for s, k in zip(stored, kept_own, strict=True))
    # a word within float error of its cut or of its neighbourhood's contest may fall either
    # way: the build's products and these are summed in other orders (another batch's shape,
    # another CPU's BLAS kernels: 8 of 306 entries flipped on an AVX2 machine, 2.6 %)
    assert differ <= max(2, sum(map(len, stored)) // 25), (differ, sum(map(len, stored)))


def test_a_phrase_says_a_name_only_where_it_holds_of_the_row(gated: Path, minilm):
    """On a version that keeps its gallery's text directions, the described word (held-out
    precision past DESCRIBED: search_gallery's premise) is in a row's phrase exactly where the
    row shows it and the gate says it holds of the row's own embedding."""
    engine = SearchEngine(Bundle.open(gated), minilm)
    gate = version_gate(engine.bundle)
    assert gate is not None
    word = described_word(engine.coder.catalog)
    x = np.asarray(EmbeddingCache.open(gated.parent / "cache").embeddings("text"), np.float32)
    shown = described_rows(engine)  # rows whose code shows the word, by precision alone
    said = [r for r in shown if gate.judge(x[r])(word)]
    assert word in gate.word_of and said  # the premise: the word is read, and holds somewhere
    for row in shown[:12]:
        phrase = engine.explain(SearchQuery.of("a red car"), row=row).item_description.phrase
        assert (word in phrase.split()) == (row in said), (row, phrase)
