"""The index-type rule: Flat, HNSW or IVF-PQ by rows and memory budget; overrides; sizes."""

from __future__ import annotations

import pytest

from indexer.format.index_plan import (
    HNSW_QUANTIZER_LISTS,
    RULES,
    SHORTLIST_RULE,
    SMALL_GALLERY,
    STORE_REASON,
    IndexTypeError,
    coarse_quantizer,
    ivf_lists,
    parse_index_types,
    parse_size,
    plan_indexes,
    pq_subquantizers,
)
from training.core.granularity import default_contract

CLIP = default_contract(512)  # 32 / 64 / 128 / 256 / 512
GIB = 2**30


def factories(rows: int, budget: int = 4 * GIB, **overrides) -> dict[int, str]:
    return {p.length: p.factory for p in plan_indexes(rows, CLIP, budget, **overrides)}


def test_small_galleries_get_exact_flat_indexes():
    assert set(factories(150_000).values()) == {"Flat"}


def test_mid_sized_galleries_get_hnsw():
    assert set(factories(500_000).values()) == {"HNSW32,Flat"}


def test_large_galleries_get_ivf_pq_with_refine_while_the_vectors_fit_the_budget():
    plans = {p.length: p for p in plan_indexes(5_000_000, CLIP, 4 * GIB)}
    # 5M · 32 · 4.25 B ≈ 0.7 GiB fits; 5M · 256 · 4.25 B ≈ 5 GiB does not: lists go on disk
    # 8,192 lists: found through a graph over the centroids
    assert plans[32].factory == "IVF8192_HNSW32,PQ8x8np,RFlat" and not plans[32].ondisk
    assert plans[256].factory == "IVF8192_HNSW32,PQ64x8np" and plans[256].ondisk
    assert plans[512].kind == "ivfpq-ondisk"


def test_the_budget_moves_the_boundary():
    # 150k rows at L = 512 are 307 MB as float32: Flat under 1 GiB, not under 100 MB
    assert factories(150_000, GIB)[512] == "Flat"
    tight = {p.length: p for p in plan_indexes(150_000, CLIP, 100 * 2**20)}
    assert tight[32].factory == "Flat"  # 19 MB
    assert tight[512].kind == "ivfpq-ondisk"  # nothing holding 307 MB of vectors fits
    # below 10,000 rows IVF cannot be trained well: Flat whatever the budget
    assert set(factories(5_000, 1024).values()) == {"Flat"}


@pytest.mark.parametrize("rows", [60_000, 1_000_000, 5_000_000])
def test_with_a_store_the_shortest_prefix_is_codes_reranked_from_it(rows: int):
    plans = {p.length: p for p in plan_indexes(rows, CLIP, 4 * GIB, store=True)}
    assert plans[32].rerank and plans[32].kind == SHORTLIST_RULE.kind
    assert plans[32].factory == f"{coarse_quantizer(rows)},SQ8"  # one byte a coordinate
    for length in (64, 128, 256, 512):  # the store serves these: Flat, no file of its own
        assert plans[length].factory == "Flat" and not plans[length].ondisk
        assert plans[length].reason == STORE_REASON and not plans[length].rerank
    overridden = plan_indexes(rows, CLIP, 4 * GIB, {256: "hnsw"}, store=True)
    assert next(p for p in overridden if p.length == 256).factory == "HNSW32,Flat"


@pytest.mark.parametrize("rows", [100, SMALL_GALLERY])
def test_a_small_gallery_with_a_store_scans_it_at_every_prefix(rows: int):
    plans = plan_indexes(rows, CLIP, 4 * GIB, store=True)
    assert all(p.factory == "Flat" and p.reason == STORE_REASON for p in plans)
    assert not any(p.rerank for p in plans)


def test_codes_reranked_from_the_store_need_a_store():
    with pytest.raises(IndexTypeError, match="reranks from the shared store"):
        plan_indexes(100_000, CLIP, 4 * GIB, {32: SHORTLIST_RULE.kind})
    plans = plan_indexes(100_000, CLIP, 4 * GIB, {64: SHORTLIST_RULE.kind}, store=True)
    assert [p.length for p in plans if p.rerank] == [32, 64]


def test_overrides_name_a_rule_or_a_factory_and_win():
    overrides = parse_index_types(["32=HNSW16", "caption=ivfpq-refine", "full=Flat"], CLIP)
    assert overrides == {32: "HNSW16", 256: "ivfpq-refine", 512: "Flat"}
    plans = {p.length: p for p in plan_indexes(500_000, CLIP, 4 * GIB, overrides)}
    assert plans[32].factory == "HNSW16" and plans[32].kind == "override"
    assert plans[256].factory == "IVF2048,PQ64x8np,RFlat" and plans[256].kind == "ivfpq-refine"
    assert plans[512].factory == "Flat"
    assert plans[64].factory == "HNSW32,Flat"  # not overridden: the rule
    assert "--index-type 32=HNSW16" in plans[32].reason


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["24=HNSW32"], "'24' is not a prefix of the contract"),
        (["HNSW32"], "expected PREFIX=FACTORY"),
        (["32=HNSW32", "object=Flat"], "names prefix 32 twice"),
    ],
)
def test_bad_overrides_are_refused(values, message):
    with pytest.raises(IndexTypeError, match=message):
        parse_index_types(values, CLIP)


def test_a_factory_faiss_cannot_build_is_refused_before_any_work():
    with pytest.raises(IndexTypeError, match="FAISS cannot build 'Bogus7'"):
        plan_indexes(1000, CLIP, GIB, {32: "Bogus7"})


def test_list_and_code_sizes():
    assert ivf_lists(1_000_000) == 4096  # 4·√n = 4000 → 4096
    assert ivf_lists(10_000) == 256  # 4·√n = 400 → 512, but at most n / 39
    assert ivf_lists(100) == 2
    assert [pq_subquantizers(n) for n in (24, 32, 384, 512, 2)] == [6, 8, 96, 128, 1]


def test_past_two_million_rows_the_lists_are_found_through_a_graph():
    assert coarse_quantizer(1_000_000) == "IVF4096"
    assert coarse_quantizer(10_000_000) == f"IVF{ivf_lists(10_000_000)}_HNSW32"
    assert ivf_lists(10_000_000) >= HNSW_QUANTIZER_LISTS > ivf_lists(1_000_000)
    shortlist = {n: plan_indexes(n, CLIP, 4 * GIB, store=True)[0].factory for n in (10**6, 10**7)}
    assert shortlist == {10**6: "IVF4096,SQ8", 10**7: "IVF16384_HNSW32,SQ8"}


def test_the_table_always_has_a_rule():
    assert not RULES[-1].fits_budget and RULES[-1].min_rows == 0 and RULES[-1].max_rows is None


def test_sizes():
    assert parse_size("4GiB") == 4 * GIB
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size("2GB") == 2 * 10**9
    assert parse_size("1500") == 1500
    for bad in ("lots", "-1GB", "0"):
        with pytest.raises(IndexTypeError, match="bad size"):
            parse_size(bad)
