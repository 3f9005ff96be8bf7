"""Concept filtering inside the search: every index type, both strategies, k hits kept."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from indexer.format.prefixes import exact_top_k
from indexer.format.row_bitmaps import AllowedRows
from service.engine.filtering import allowed_rows, filtered_search
from service.engine.search import SearchEngine
from service.results import ConceptRef

N, DIM = 3000, 16
FACTORIES = ["Flat", "HNSW32,Flat", "IVF16,Flat", "IVF16,PQ4x4np,RFlat"]
SEARCH = {"Flat": "", "HNSW32,Flat": "efSearch=64", "IVF16,Flat": "nprobe=16"}


@pytest.fixture(scope="module")
def gallery() -> np.ndarray:
    x = np.random.default_rng(0).normal(size=(N, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module", params=FACTORIES)
def index(request: pytest.FixtureRequest, gallery: np.ndarray) -> faiss.Index:
    index = faiss.index_factory(DIM, request.param, faiss.METRIC_INNER_PRODUCT)
    index.train(gallery)
    index.add(gallery)
    parameters = SEARCH.get(request.param, "nprobe=16,k_factor_rf=32")
    faiss.ParameterSpace().set_index_parameters(index, parameters)
    return index


def test_allowed_rows_include_and_complement():
    include = AllowedRows(10, np.array([2, 5, 7]))
    assert include.count == 3 and include.materialise().tolist() == [2, 5, 7]
    assert include.contains(np.array([1, 2, 7])).tolist() == [False, True, True]
    complement = AllowedRows.excluding(10, np.array([2, 5, 7]))
    assert complement.bits is not None and complement.count == 7
    assert complement.materialise().tolist() == [0, 1, 3, 4, 6, 8, 9]
    assert complement.contains(np.array([1, 2, 7])).tolist() == [True, False, False]


@pytest.mark.parametrize("exact_max", [0, 10_000], ids=["selector", "exact"])
@pytest.mark.parametrize("complement", [False, True], ids=["require", "exclude"])
def test_every_hit_is_allowed_and_k_hits_come_back(
    index: faiss.Index, gallery: np.ndarray, exact_max: int, complement: bool
):
    rows = np.arange(0, N, 3, dtype=np.int64)  # 1,000 rows: far from the query's neighbours
    allowed = AllowedRows.excluding(N, rows) if complement else AllowedRows(N, rows)
    query = gallery[1:2]  # row 1 is not in `rows`: its neighbourhood is mostly filtered
    scores, found = filtered_search(index, query, 10, allowed, exact_max=exact_max)
    assert found.shape == (1, 10) and (found >= 0).all()
    assert allowed.contains(found[0]).all()
    assert (np.diff(scores[0]) <= 1e-6).all()
    exact_scores, exact_rows = exact_top_k(gallery[allowed.materialise()], query, 10)
    recall = len(np.intersect1d(found[0], allowed.materialise()[exact_rows[0]])) / 10
    assert recall >= 0.8  # approximate indexes may miss a few, exact ones none
    if exact_max:
        np.testing.assert_allclose(scores[0], exact_scores[0], rtol=1e-5)


def test_fewer_allowed_rows_than_k_give_them_all_then_padding(index: faiss.Index, gallery):
    allowed = AllowedRows(N, np.array([4, 40, 400], dtype=np.int64))
    scores, found = filtered_search(index, gallery[:1], 5, allowed, exact_max=0)
    assert sorted(found[0][:3].tolist()) == [4, 40, 400] and found[0][3:].tolist() == [-1, -1]
    empty = AllowedRows(N, np.zeros(0, dtype=np.int64))
    scores, found = filtered_search(index, gallery[:1], 5, empty)
    assert (found == -1).all() and np.isneginf(scores).all()


def test_a_very_selective_filter_on_hnsw_still_gives_k_hits(gallery: np.ndarray):
    """HNSW's traversal can strand under a selective filter; the exact fallback catches it."""
    index = faiss.index_factory(DIM, "HNSW8,Flat", faiss.METRIC_INNER_PRODUCT)
    index.add(gallery)
    index.hnsw.efSearch = 16
    rows = np.sort(np.random.default_rng(1).choice(N, 12, replace=False)).astype(np.int64)
    _, found = filtered_search(index, gallery[:1], 10, AllowedRows(N, rows), exact_max=0)
    assert (found >= 0).sum() == 10 and np.isin(found[0], rows).all()


def test_allowed_rows_from_the_bundle_postings(engine: SearchEngine):
    bundle = engine.bundle
    sizes = {c: len(bundle.postings(c)[0]) for c in range(2 * bundle.dim)}
    a, b = sorted(sizes, key=lambda c: -sizes[c])[:2]
    rows_a, rows_b = bundle.postings(a)[0], bundle.postings(b)[0]
    only_a = allowed_rows(bundle, [ConceptRef(id=a)], [])
    assert only_a.materialise().tolist() == rows_a.tolist()
    both = allowed_rows(
        bundle, [ConceptRef(id=a), ConceptRef(label=engine.coder.catalog[b].label)], []
    )
    assert both.materialise().tolist() == np.intersect1d(rows_a, rows_b).tolist()
    a_not_b = allowed_rows(bundle, [ConceptRef(id=a)], [ConceptRef(id=b)])
    assert a_not_b.materialise().tolist() == np.setdiff1d(rows_a, rows_b).tolist()
    not_b = allowed_rows(bundle, [], [ConceptRef(id=b)])
    assert not_b.count == bundle.rows - len(rows_b)
    assert not_b.materialise().tolist() == np.setdiff1d(np.arange(bundle.rows), rows_b).tolist()
    name = engine.coder.catalog[a].name
    named = allowed_rows(bundle, [ConceptRef(name=name)], [])
    same_name = [c for c in range(2 * bundle.dim) if engine.coder.catalog[c].name == name]
    expected = np.unique(np.concatenate([bundle.postings(c)[0] for c in same_name]))
    assert named.materialise().tolist() == expected.tolist()


def test_references_count_once_per_concept_and_exclusion_is_one_union(engine: SearchEngine):
    """64 references to a handful of concepts give the set of those concepts (the union of
    their rows, each marked once), the same as naming each concept once."""
    bundle = engine.bundle
    concepts = list(range(0, 16, 2))
    once = allowed_rows(bundle, [], [ConceptRef(id=c) for c in concepts])
    repeated = allowed_rows(bundle, [], [ConceptRef(id=concepts[i % 8]) for i in range(64)])
    expected = np.unique(np.concatenate([bundle.postings(c)[0] for c in concepts]))
    allowed = np.setdiff1d(np.arange(bundle.rows), expected).tolist()
    assert once.materialise().tolist() == repeated.materialise().tolist() == allowed
    required = allowed_rows(bundle, [ConceptRef(id=concepts[0])] * 64, [])
    assert required.materialise().tolist() == bundle.postings(concepts[0])[0].tolist()


def test_a_filtered_hnsw_search_meets_as_many_allowed_rows_as_an_unfiltered_one_meets_rows():
    from service.engine.filtering import exact_budget, filtered_ef

    assert filtered_ef(64, 10, 1.0) == 64  # unfiltered share: its own ef
    assert filtered_ef(64, 10, 0.5) == 128  # ef·share = the unfiltered search's ef
    assert filtered_ef(64, 100, 0.8) == 125  # a funnel's shortlist: wanted above ef
    assert filtered_ef(64, 100, 0.01) == 10_000
    assert exact_budget(4096, 512) == exact_budget(4096, 256) == 4096
    assert exact_budget(4096, 32) == 4096 * 8  # a short prefix scores more rows exactly


def test_every_filter_share_finds_the_exact_top_k_through_hnsw():
    import faiss

    from service.engine.exact_scan import exact_scores

    rng = np.random.default_rng(5)
    x = rng.normal(size=(3000, 16)).astype(np.float32)
    index = faiss.IndexHNSWFlat(16, 16, faiss.METRIC_INNER_PRODUCT)
    index.add(x)
    q = rng.normal(size=(1, 16)).astype(np.float32)
    for share in (0.001, 0.02, 0.3, 0.9):
        rows = np.flatnonzero(rng.random(3000) < share).astype(np.int64)
        for allowed in (AllowedRows(3000, rows), AllowedRows.excluding(3000, rows)):
            _, found = filtered_search(index, q, 10, allowed, exact_max=8)
            _, truth = exact_scores(index, q, allowed.materialise(), 10)
            hit = len(set(found[0][found[0] >= 0]) & set(truth[0])) / max(1, truth.shape[1])
            assert hit >= 0.9, (share, allowed.count, hit)
            assert set(found[0][found[0] >= 0]) <= set(allowed.materialise().tolist())


def test_a_filtered_ivf_search_probes_as_many_allowed_rows_as_an_unfiltered_one_probes_rows():
    from service.engine.filtering import filtered_nprobe

    assert filtered_nprobe(8, 1024, 1.0) == 8  # unfiltered share: its own nprobe
    assert filtered_nprobe(8, 1024, 0.25) == 32
    assert filtered_nprobe(8, 1024, 0.001) == 1024  # never more than every list


def test_every_filter_share_finds_the_exact_top_k_through_ivf():
    """Premise: clustered rows, on which the unfiltered IVF search at its own nprobe (4 of 64
    lists) finds the exact top 10. With that nprobe a filtered search meets few allowed rows;
    widened by the filter's share it finds the exact filtered top 10."""
    import faiss

    from service.engine.exact_scan import exact_scores

    rng = np.random.default_rng(6)
    centres = rng.normal(size=(64, 16))
    x = (centres[rng.integers(0, 64, 4000)] + 0.3 * rng.normal(size=(4000, 16))).astype(np.float32)
    index = faiss.index_factory(16, "IVF64,Flat", faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    faiss.extract_index_ivf(index).nprobe = 4
    storage = faiss.IndexFlatIP(16)
    storage.add(x)
    q = x[:1] + 0.1 * rng.normal(size=(1, 16)).astype(np.float32)
    _, unfiltered = index.search(q, 10)
    assert set(unfiltered[0]) == set(storage.search(q, 10)[1][0])  # the premise
    for share in (0.02, 0.1, 0.3, 0.9):
        rows = np.flatnonzero(rng.random(4000) < share).astype(np.int64)
        for allowed in (AllowedRows(4000, rows), AllowedRows.excluding(4000, rows)):
            _, found = filtered_search(index, q, 10, allowed, exact_max=8)
            _, truth = exact_scores(storage, q, allowed.materialise(), 10)
            hit = len(set(found[0][found[0] >= 0]) & set(truth[0])) / truth.shape[1]
            assert hit >= 0.9, (share, allowed.count, hit)
            assert set(found[0][found[0] >= 0]) <= set(allowed.materialise().tolist())


def test_the_same_filter_has_the_same_key_and_another_filter_another(engine: SearchEngine):
    bundle = engine.bundle
    a, b = ConceptRef(id=0), ConceptRef(id=2)
    assert allowed_rows(bundle, [a], [b]).key == allowed_rows(bundle, [a, a], [b]).key
    filters = [([a], [b]), ([b], [a]), ([a], []), ([], [a])]
    keys = {allowed_rows(bundle, r, e).key for r, e in filters}
    assert len(keys) == 4
    assert allowed_rows(bundle, [a], [b]).within(np.arange(5)).key is None  # a where: no block
