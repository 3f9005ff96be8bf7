"""Gallery trust at build and its query gate, on a text bundle whose readout holds zero-shot
words (search_gallery.build_text_bundle's `zero_shot_words`: caption words with their text
directions and no labels).

What holds for any correct build: the version keeps each concept's agreement (in [0, 1], NaN
where unmeasured) and shows a concept only where it agrees; a row's stored zero-shot entries
are the words its gate keeps; and a query equal to a row's embedding keeps, through the query
gate, the zero-shot words its row kept (up to the int8 store's rounding, which the build read)."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pytest
from search_gallery import build_text_bundle

from indexer.format.bundle import Bundle
from indexer.verify.check import verify_bundle
from indexer.vocabulary.query_gate import QueryGate
from service.engine.explain import query_words, row_words
from training.cedar.gallery_trust import AGREEMENT, ZERO_SHOT_AGREEMENT
from training.core.cache import EmbeddingCache

ZERO_SHOT_WORDS = ["red", "blue", "car", "dog", "tree", "yellow", "square", "man"]


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
    differ = sum(len(s ^ k) for s, k in zip(stored, kept, strict=True))
    assert differ <= max(2, sum(map(len, stored)) // 50), (differ, sum(map(len, stored)))
