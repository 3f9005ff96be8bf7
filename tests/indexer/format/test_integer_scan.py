"""A direct scan of an int8 store in integer arithmetic (indexer/format/store/integer_scan.py):
the approximation stays within its bound, and the scan's answer is the float scan's — every
query, with and without a filter mask, across blocks, short of k rows; equal rows to float
rounding — or the float scan answers where torch has no integer product."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from bundle_inputs import gaussian_unit_rows
from store_scans import assert_same_answer, float_scan

import indexer.format.store as store_module
from indexer.format.store import INTEGER_WIDTH, VectorStore
from indexer.format.store.block_codes import block_ends, block_rotation
from indexer.format.store.integer_scan import (
    FLOAT_SLACK,
    approximate_scores,
    best_values,
    integer_product,
    integer_products,
    kth_value,
    rounded_queries,
)
from indexer.format.store.writer import StoreWriter, store_record, write_rotation
from training.core.metrics import prefix_vectors

DIM, LENGTHS = 64, [8, 16, 32, 64]

pytestmark = pytest.mark.skipif(integer_product() is None, reason="no torch._int_mm here")


def written_store(folder: Path, rows: np.ndarray) -> VectorStore:
    """An int8 store of `rows` with the index build's rotated blocks."""
    rotation = block_rotation(block_ends(LENGTHS, DIM))
    writer = StoreWriter(folder, len(rows), DIM, LENGTHS, "int8", rotation=rotation)
    writer.add(rows)
    writer.close()
    write_rotation(folder, rotation)
    return VectorStore(folder, store_record("int8", LENGTHS, rotated=True))


def test_the_rounded_queries_score_every_row_within_the_bound(tmp_path: Path):
    store = written_store(tmp_path, gaussian_unit_rows(500, DIM, 0))
    queries = gaussian_unit_rows(6, DIM, 1)
    for length in LENGTHS:
        turned = store._turned(prefix_vectors(queries, length), length)
        rounded = rounded_queries(turned, store.ends)
        assert rounded.laid.shape[1] % 8 == 0 and rounded.blocks == LENGTHS.index(length) + 1
        products = integer_products(store.codes, 0, store.rows, length, rounded.laid)
        at = store.lengths.index(length)
        approx = approximate_scores(products, store.scales, store.norms[:, at], rounded)
        exact = store.block_scores(0, store.rows, length, prefix_vectors(queries, length))
        gap = np.abs(approx - exact).max(axis=1)
        assert (gap <= rounded.bound - FLOAT_SLACK + 1e-6).all(), (length, gap, rounded.bound)
        assert (gap > 0).any()  # rounded, not exact: the bound is what makes the scan exact


@pytest.mark.parametrize("k", [1, 10, 700])
def test_the_integer_scan_answers_as_the_float_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, k: int
):
    rows = gaussian_unit_rows(600, DIM, 2)
    rows[100:140] = rows[7]  # 41 equal rows across the k-th place
    store = written_store(tmp_path, rows)
    queries = np.concatenate([rows[[7]], gaussian_unit_rows(4, DIM, 3)])
    allowed = np.random.default_rng(4).random(600) < 0.3
    for length in LENGTHS:
        q = prefix_vectors(queries, length)
        for mask in (None, allowed):
            got = store.integer_scan(q, length, k, mask)
            assert_same_answer(
                store, q, length, got, float_scan(store, monkeypatch, q, length, k, mask)
            )
            if mask is not None:
                assert allowed[got[1][got[1] >= 0]].all()
    assert (store.integer_scan(prefix_vectors(queries, 64), 64, 700)[1][:, 600:] == -1).all()


def test_the_integer_scan_reads_across_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    rows = gaussian_unit_rows(2600, DIM, 5)
    store = written_store(tmp_path, rows)
    monkeypatch.setattr(store_module, "BLOCK_BYTES", 1)  # 1,024 rows a block: three blocks
    queries = prefix_vectors(rows[[5, 1500, 2599]], 32)
    assert store.integer_scannable(32, 5, len(queries))  # what scan serves
    got = store.scan(queries, 32, 5)
    np.testing.assert_array_equal(got[1][:, 0], [5, 1500, 2599])  # each row finds itself
    np.testing.assert_array_equal(got[1], float_scan(store, monkeypatch, queries, 32, 5)[1])
    allowed = np.arange(2600) % 3 == 0
    np.testing.assert_array_equal(
        store.scan(queries, 32, 5, allowed)[1],
        float_scan(store, monkeypatch, queries, 32, 5, allowed)[1],
    )


def test_the_running_values_are_the_k_largest_of_every_block_so_far():
    blocks = [
        gaussian_unit_rows(3, n, seed).astype(np.float32) for n, seed in ((4, 1), (0, 2), (9, 3))
    ]
    best = np.zeros((3, 0), np.float32)
    seen = np.zeros((3, 0), np.float32)
    for block in blocks:
        best = best_values(best, block, 6)
        seen = np.concatenate([seen, block], axis=1)
        expected = -np.sort(-seen, axis=1)[:, :6]
        np.testing.assert_array_equal(best, expected)
        kth = kth_value(best, 6)
        if seen.shape[1] < 6:
            assert np.isneginf(kth).all()
        else:
            np.testing.assert_array_equal(kth, expected[:, 5])


def test_a_block_the_mask_empties_leaves_the_answer_as_the_float_scans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    rows = gaussian_unit_rows(2600, DIM, 6)
    store = written_store(tmp_path, rows)
    monkeypatch.setattr(store_module, "BLOCK_BYTES", 1)  # 1,024 rows a block: three blocks
    allowed = np.arange(2600) >= 2100  # the first two blocks hold no allowed row
    queries = prefix_vectors(rows[[5, 2300]], 32)
    np.testing.assert_array_equal(
        store.scan(queries, 32, 5, allowed)[1],
        float_scan(store, monkeypatch, queries, 32, 5, allowed)[1],
    )


def test_without_an_integer_product_the_store_scans_in_floats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    store = written_store(tmp_path, gaussian_unit_rows(300, DIM, 6))
    q = prefix_vectors(gaussian_unit_rows(2, DIM, 7), 16)
    want = store.scan(q, 16, 4)
    monkeypatch.setattr(store_module, "integer_product", lambda: None)
    assert not store.integer_scannable(16, 4)
    np.testing.assert_array_equal(store.scan(q, 16, 4)[1], want[1])
    assert not store.integer_scannable(12, 4) and not store.integer_scannable(16, 0)


def test_a_batch_reads_in_integers_where_the_head_is_long_enough_for_it(tmp_path: Path):
    store = written_store(tmp_path, gaussian_unit_rows(100, DIM, 8))
    assert store.integer_scannable(32, 10, 32 // INTEGER_WIDTH)
    assert not store.integer_scannable(32, 10, 32 // INTEGER_WIDTH + 1)
