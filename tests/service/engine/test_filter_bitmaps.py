"""The bitmap path of concept filters: a dense concept's kept bitmap gives the rows its
postings list, the set operators give what sorted-id set algebra gives whatever form each side
has, and an HNSW search over a large allowed share returns k allowed rows."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from indexer.format.row_bitmaps import AllowedRows
from indexer.format.served.params import NO_PARAMS
from indexer.format.served_index import mapped
from service.engine.exact_scan import exact_scores
from service.engine.filtering import (
    POST_FILTER_FETCH,
    allowed_rows,
    filtered_search,
    post_filtered,
)
from service.engine.search import SearchEngine
from service.results import ConceptRef

N = 3200


def random_rows(rng: np.random.Generator, share: float) -> np.ndarray:
    return np.flatnonzero(rng.random(N) < share).astype(np.int64)


def as_bits(rows: np.ndarray) -> AllowedRows:
    allowed = AllowedRows(N, bits=AllowedRows(N, rows).bitmap())
    assert allowed.count == len(rows)
    return allowed


def canonical_form(allowed: AllowedRows) -> bool:
    """A bitmap when dense (≥ 1/32 of the rows), listed rows when not."""
    return (allowed.bits is not None) == (allowed.count * 32 >= N)


@pytest.mark.parametrize("shares", [(0.5, 0.9), (0.5, 0.01), (0.01, 0.6), (0.005, 0.02)])
def test_set_operators_match_sorted_id_algebra_in_either_form(shares: tuple[float, float]):
    rng = np.random.default_rng(int(shares[0] * 1000 + shares[1] * 10))
    a, b = random_rows(rng, shares[0]), random_rows(rng, shares[1])
    everything = np.arange(N)
    for left in (AllowedRows(N, a), as_bits(a)):
        for right in (AllowedRows(N, b), as_bits(b)):
            both, only = left & right, left - right
            assert both.materialise().tolist() == np.intersect1d(a, b).tolist()
            assert only.materialise().tolist() == np.setdiff1d(a, b).tolist()
            assert (~right).materialise().tolist() == np.setdiff1d(everything, b).tolist()
            canonical = all(canonical_form(s) for s in (left, right))
            for result in (both, only, ~right):
                assert result.count == len(result.materialise())
                assert result.bits is None or result.count * 32 >= N  # few rows: listed
                assert canonical_form(result) or not canonical  # the form follows the count
            assert left.within(b).materialise().tolist() == np.intersect1d(a, b).tolist()
            assert left.mask().tolist() == np.isin(everything, a).tolist()


def test_a_dense_concepts_bitmap_gives_the_rows_its_postings_list(engine: SearchEngine):
    bundle = engine.bundle
    sizes = {c: len(bundle.postings(c)[0]) for c in range(2 * bundle.dim)}
    dense = [c for c in sorted(sizes, key=lambda c: -sizes[c]) if sizes[c] * 32 >= bundle.rows]
    sparse = [c for c in sorted(sizes, key=lambda c: sizes[c]) if 0 < sizes[c] * 32 < bundle.rows]
    if len(dense) < 2 or not sparse:
        pytest.skip("the test bundle has too few dense or sparse concepts")
    everything = np.arange(bundle.rows)
    a, b, s = dense[0], dense[1], sparse[0]
    rows = {c: bundle.postings(c)[0] for c in (a, b, s)}
    for cold in (True, False):  # the bitmaps built here, then the kept ones
        if cold:
            bundle.concept_bitmaps.forget()
        only_a = allowed_rows(bundle, [ConceptRef(id=a)], [])
        assert only_a.bits is not None and only_a.materialise().tolist() == rows[a].tolist()
        a_and_b = allowed_rows(bundle, [ConceptRef(id=a), ConceptRef(id=b)], [])
        assert a_and_b.materialise().tolist() == np.intersect1d(rows[a], rows[b]).tolist()
        a_and_s = allowed_rows(bundle, [ConceptRef(id=a), ConceptRef(id=s)], [])
        assert a_and_s.rows is not None  # started from the sparse side, ids kept
        assert a_and_s.materialise().tolist() == np.intersect1d(rows[a], rows[s]).tolist()
        a_not_b = allowed_rows(bundle, [ConceptRef(id=a)], [ConceptRef(id=b)])
        assert a_not_b.materialise().tolist() == np.setdiff1d(rows[a], rows[b]).tolist()
        not_a_or_s = allowed_rows(bundle, [], [ConceptRef(id=a), ConceptRef(id=s)])
        expected = np.setdiff1d(everything, np.union1d(rows[a], rows[s]))
        assert not_a_or_s.materialise().tolist() == expected.tolist()
    assert bundle.concept_bitmaps.get(a)[1] is bundle.concept_bitmaps.get(a)[1]  # kept


@pytest.mark.parametrize("share", [0.3, 0.9, 0.99])
def test_a_filtered_hnsw_search_over_a_large_share_returns_k_allowed_rows(share: float):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(N, 16)).astype(np.float32)
    index = faiss.IndexHNSWFlat(16, 16, faiss.METRIC_INNER_PRODUCT)
    index.add(x)
    allowed = as_bits(random_rows(rng, share))
    selector = allowed.selector()
    assert isinstance(selector, faiss.IDSelectorBitmap) and selector.referenced is allowed.bits
    hits = 0
    for q in rng.normal(size=(20, 16)).astype(np.float32):
        scores, found = filtered_search(index, q[None, :], 10, allowed, exact_max=0)
        assert (found >= 0).sum() == 10 and allowed.contains(found[0]).all()
        assert (np.diff(scores[0]) <= 1e-6).all()
        _, truth = exact_scores(index, q[None, :], allowed.materialise(), 10)
        hits += len(set(found[0].tolist()) & set(truth[0].tolist()))
    assert hits / 200 >= 0.95


def test_a_large_filter_away_from_the_query_falls_back_to_the_filtered_traversal():
    """The premise built in: the allowed rows (40 % of them) are those least like the query, so
    none is among the unfiltered search's first hits, and the over-fetch finds too few."""
    rng = np.random.default_rng(8)
    x = rng.normal(size=(N, 16)).astype(np.float32)
    index = faiss.IndexHNSWFlat(16, 16, faiss.METRIC_INNER_PRODUCT)
    index.add(x)
    q = rng.normal(size=16).astype(np.float32)
    far = np.argsort(x @ q)[: int(0.4 * N)]  # the 40 % with the lowest scores
    allowed = as_bits(np.sort(far))
    unfiltered = index.search(q[None, :], 50)[1][0]
    assert not allowed.contains(unfiltered).any()
    _, found = filtered_search(index, q[None, :], 10, allowed, exact_max=0)
    assert (found >= 0).sum() == 10 and allowed.contains(found[0]).all()
    _, truth = exact_scores(index, q[None, :], allowed.materialise(), 10)
    assert len(set(found[0].tolist()) & set(truth[0].tolist())) >= 9


def test_a_large_filter_keeps_the_allowed_hits_of_the_unfiltered_search_in_order():
    rng = np.random.default_rng(9)
    x = rng.normal(size=(N, 16)).astype(np.float32)
    index = faiss.IndexHNSWFlat(16, 16, faiss.METRIC_INNER_PRODUCT)
    index.add(x)
    allowed = as_bits(random_rows(rng, 0.5))
    share = allowed.count / N
    fetch = int(np.ceil(POST_FILTER_FETCH * 10 / share))  # post_filtered's over-fetch
    for q in rng.normal(size=(5, 16)).astype(np.float32):
        scores, found = filtered_search(index, q[None, :], 10, allowed, exact_max=0)
        wide = faiss.SearchParametersHNSW(efSearch=fetch)
        top_scores, top = index.search(q[None, :], fetch, params=wide)
        kept = allowed.contains(top[0])
        assert found[0].tolist() == top[0][kept][:10].tolist()
        np.testing.assert_array_equal(scores[0], top_scores[0][kept][:10])
        direct = post_filtered(mapped(index), 16, q[None, :], 10, 10, allowed, share, NO_PARAMS)
        assert direct is not None and direct[1].tolist() == found.tolist()
