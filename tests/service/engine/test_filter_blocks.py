"""Frequent filters' allowed rows kept together: the same answers as the exact scan they
replace, built once per filter and prefix, within their budget."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from indexer.format.row_bitmaps import AllowedRows
from service.engine.exact_scan import exact_scores, stored_rows
from service.engine.filter_blocks import BLOCK_MIN_ROWS, FilterBlock, FilterBlocks
from service.engine.filtering import filtered_search

N, DIM = 24_000, 16


@pytest.fixture(scope="module")
def gallery() -> np.ndarray:
    """Unit rows, a tenth of them exact copies of others (so ties happen and must be broken
    by row, as the exact scan breaks them)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(N, DIM)).astype(np.float32)
    copies = rng.choice(N, N // 10, replace=False)
    x[copies] = x[rng.choice(N, N // 10)]
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def hnsw(gallery: np.ndarray) -> faiss.Index:
    index = faiss.IndexHNSWFlat(DIM, 16, faiss.METRIC_INNER_PRODUCT)
    index.add(gallery)
    return index


def frequent(seed: int, share: float = 0.2) -> AllowedRows:
    rows = np.flatnonzero(np.random.default_rng(seed).random(N) < share).astype(np.int64)
    return AllowedRows(N, rows, key=("test filter", seed))


def test_a_block_answers_what_the_exact_scan_answers(gallery: np.ndarray, hnsw: faiss.Index):
    allowed = frequent(1)
    assert allowed.count >= BLOCK_MIN_ROWS
    blocks = FilterBlocks()
    queries = np.concatenate([gallery[:20], np.random.default_rng(2).normal(size=(20, DIM))])
    for q in queries.astype(np.float32):
        for k in (1, 10, 100):
            scores, rows = filtered_search(hnsw, q[None, :], k, allowed, blocks=blocks)
            truth_scores, truth = exact_scores(hnsw, q[None, :], allowed.materialise(), k)
            assert rows[0].tolist() == truth[0].tolist()
            np.testing.assert_allclose(scores[0], truth_scores[0], rtol=1e-6)
    assert len(blocks) == 1  # one filter at one prefix: one block


def test_a_block_is_built_once_per_filter_and_prefix(gallery: np.ndarray):
    blocks, built = FilterBlocks(), []
    storage = faiss.IndexFlatIP(DIM)
    storage.add(gallery)

    def rows_of(allowed: AllowedRows):
        def read() -> np.ndarray:
            built.append(allowed.key)
            return allowed.materialise()

        return read

    a, b = frequent(4), frequent(5)
    for allowed in (a, b, a, a, b):
        block = blocks.get(allowed.key, rows_of(allowed), lambda r: stored_rows(storage, r))
        assert block.rows.tolist() == allowed.materialise().tolist()
    assert built == [a.key, b.key]
    assert blocks.kept_bytes == sum(
        len(x.materialise()) * (DIM * 2 + 8) for x in (a, b)
    )  # float16 codes and int64 rows


def test_the_budget_drops_the_least_recently_used_block(gallery: np.ndarray):
    storage = faiss.IndexFlatIP(DIM)
    storage.add(gallery)
    one = FilterBlock.of(frequent(6).materialise(), gallery[frequent(6).materialise()]).nbytes
    blocks = FilterBlocks(budget=int(2.5 * one))
    filters = [frequent(6), frequent(7), frequent(8)]
    for allowed in [filters[0], filters[1], filters[0], filters[2]]:  # 1 is the least recent
        blocks.get(allowed.key, allowed.materialise, lambda r: stored_rows(storage, r))
    assert len(blocks) == 2 and blocks.kept_bytes <= blocks.budget
    assert blocks.keys() == [filters[0].key, filters[2].key]


def test_which_filters_get_a_block():
    blocks = FilterBlocks(budget=2**20)
    assert not blocks.fits(BLOCK_MIN_ROWS - 1, 16, 1_000_000)  # few: read where they lie
    assert blocks.fits(BLOCK_MIN_ROWS, 16, 1_000_000)
    assert not blocks.fits(300_000, 16, 1_000_000)  # most rows: the index's own search
    assert not blocks.fits(40_000, 16, 1_000_000)  # 1.28 MB: over this budget
    assert FilterBlocks().fits(40_000, 16, 1_000_000)


def test_a_cold_search_builds_its_own_and_leaves_the_kept_blocks(
    gallery: np.ndarray, hnsw: faiss.Index
):
    blocks, allowed = FilterBlocks(), frequent(9)
    q = gallery[:1]
    warm = filtered_search(hnsw, q, 10, allowed, blocks=blocks)
    with blocks.cold():
        assert len(blocks) == 0
        cold = filtered_search(hnsw, q, 10, frequent(10), blocks=blocks)
        assert len(blocks) == 1
    assert len(blocks) == 1 and blocks.keys()[0][0] == allowed.key
    assert warm[1][0].tolist() != cold[1][0].tolist()


def test_filters_without_a_key_or_with_few_rows_are_scanned_where_they_lie(
    gallery: np.ndarray, hnsw: faiss.Index
):
    blocks = FilterBlocks()
    rows = frequent(11).materialise()
    filtered_search(hnsw, gallery[:1], 10, AllowedRows(N, rows), blocks=blocks)  # no key
    filtered_search(hnsw, gallery[:1], 10, AllowedRows(N, rows[:100], key="few"), blocks=blocks)
    assert len(blocks) == 0
