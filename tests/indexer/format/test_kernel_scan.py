"""A store kept by blocks (indexer/format/store/block_layout.py) and its direct scan with torch's
weight-only int8 kernel (kernel_scan.py): the block files read back as the row-major codes they
stand for, every row's approximate score within the bound, and the scan's answer the float
scan's, for blocks the kernel takes and blocks it does not (read in integers or float32), with
and without a mask, short of k rows, over several chunks; and the same answer as the same rows
kept row by row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from bundle_inputs import gaussian_unit_rows
from store_scans import assert_same_answer, float_scan

import indexer.format.store as store_module
from indexer.format.store import StoreError, VectorStore
from indexer.format.store.block_codes import block_ends, block_rotation
from indexer.format.store.block_layout import BlockCodes, block_files
from indexer.format.store.kernel_scan import (
    FLOAT_SLACK,
    kernel_ready,
    kernel_scores,
    turned_blocks,
    weight_kernel,
)
from indexer.format.store.writer import (
    StoreWriter,
    store_record,
    write_filtered_store,
    write_rotation,
)
from training.core.metrics import prefix_vectors

# blocks 20, 24, 36 and 16 wide: the kernel takes the last (a multiple of 16), the second is
# read in integers (a multiple of 8), the others in float32
DIM, LENGTHS = 96, [20, 44, 80, 96]

pytestmark = pytest.mark.skipif(weight_kernel() is None, reason="no weight-only int8 kernel")


def written_store(folder: Path, rows: np.ndarray, layout: str = "blocks") -> VectorStore:
    """An int8 store of `rows` with the index build's rotated blocks, kept by `layout`."""
    ends = block_ends(LENGTHS, DIM)
    rotation = block_rotation(ends)
    folder.mkdir(parents=True, exist_ok=True)
    writer = StoreWriter(folder, len(rows), DIM, LENGTHS, "int8", rotation=rotation, layout=layout)
    writer.add(rows)
    writer.close()
    write_rotation(folder, rotation)
    blocks = ends if layout == "blocks" else None
    return VectorStore(folder, store_record("int8", LENGTHS, rotated=True, blocks=blocks))


def test_the_block_files_read_back_as_the_row_major_codes(tmp_path: Path):
    rows = gaussian_unit_rows(300, DIM, 0)
    blocks = written_store(tmp_path / "blocks", rows)
    plain = written_store(tmp_path / "rows", rows, layout="rows")
    assert isinstance(blocks.codes, BlockCodes) and blocks.layout == "blocks"
    assert sorted(p.name for p in (tmp_path / "blocks").glob("store_vectors*")) == sorted(
        block_files(blocks.ends)
    )
    assert blocks.codes.shape == plain.codes.shape and blocks.codes.dtype == plain.codes.dtype
    picked = np.array([5, 0, 299, 5, 17])
    for key in [
        slice(None),
        slice(10, 40),
        picked,
        (picked, slice(0, 20)),
        (picked, slice(0, 50)),
        (slice(3, 9), slice(30, 90)),
        (slice(None), slice(0, 96)),
        7,
    ]:
        np.testing.assert_array_equal(blocks.codes[key], plain.codes[key])
    np.testing.assert_array_equal(np.asarray(blocks.codes), np.asarray(plain.codes))
    queries = gaussian_unit_rows(3, DIM, 1)
    for length in [*LENGTHS, 30]:
        q = prefix_vectors(queries, length)
        np.testing.assert_allclose(
            blocks.rows_scores(picked, length, q), plain.rows_scores(picked, length, q), atol=1e-6
        )


def test_the_kernel_scores_every_row_within_the_bound(tmp_path: Path):
    store = written_store(tmp_path, gaussian_unit_rows(503, DIM, 0))
    queries = gaussian_unit_rows(5, DIM, 1)
    covering = store.codes.covering(DIM)
    ready = [kernel_ready(codes) for _, _, codes in covering]
    assert ready == [False, False, False, True]
    q = store._turned(queries, DIM)
    kinds = [part.kernel for part in turned_blocks(q, store.ends, ready).parts]
    assert kinds == [False, False, False, True]  # widths 20, 24, 36, 16: float32 but the last
    for length in LENGTHS:
        at = store.lengths.index(length)
        q = prefix_vectors(queries, length)
        parts = store.codes.covering(length)
        blocks = turned_blocks(
            store._turned(q, length), store.ends, [kernel_ready(c) for _, _, c in parts]
        )
        approx = kernel_scores(
            blocks, [codes for _, _, codes in parts], store.scales, store.norms[:, at]
        )
        exact = store.block_scores(0, store.rows, length, q)
        gap = np.abs(approx - exact).max(axis=1)
        assert (gap <= blocks.bound - FLOAT_SLACK + 1e-6).all(), (length, gap, blocks.bound)
        if length == DIM:  # the kernel's bf16 block: not exact, the bound makes it so
            assert (gap > 1e-5).any()
        else:  # blocks of widths not a multiple of 16: scored in float32, exact
            assert (gap <= 1e-5).all()


@pytest.mark.parametrize("k", [1, 10, 700])
def test_the_kernel_scan_answers_as_the_float_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, k: int
):
    # near-duplicates, so that rows lie within the bound of the k-th and must be rescored
    base = gaussian_unit_rows(40, DIM, 0)
    noise = 0.02 * np.random.default_rng(2).normal(size=(603, DIM)).astype(np.float32)
    rows = prefix_vectors(base[np.arange(603) % 40] + noise, DIM)
    store = written_store(tmp_path, rows)
    queries = gaussian_unit_rows(2, DIM, 3)
    allowed = np.random.default_rng(4).random(store.rows) < 0.6
    for length in LENGTHS:
        q = prefix_vectors(queries, length)
        assert store.integer_scannable(length, k, len(q))
        for mask in (None, allowed):
            got = store.scan(q, length, k, mask)
            want = float_scan(store, monkeypatch, q, length, k, mask)
            assert_same_answer(store, q, length, got, want)
            if mask is not None:
                assert allowed[got[1][got[1] >= 0]].all()


def test_kept_by_blocks_or_by_rows_the_scan_answers_the_same(tmp_path: Path):
    rows = gaussian_unit_rows(400, DIM, 0)
    blocks = written_store(tmp_path / "blocks", rows)
    plain = written_store(tmp_path / "rows", rows, layout="rows")
    q = prefix_vectors(gaussian_unit_rows(1, DIM, 5), 48)
    got, want = blocks.scan(q, 48, 10), plain.scan(q, 48, 10)
    np.testing.assert_allclose(got[0], want[0], atol=1e-5)
    np.testing.assert_array_equal(got[1], want[1])


def test_a_filtered_copy_of_a_store_kept_by_blocks_keeps_its_layout(tmp_path: Path):
    rows = gaussian_unit_rows(200, DIM, 0)
    store = written_store(tmp_path / "base", rows)
    keep = np.arange(200) % 3 != 0
    (tmp_path / "kept").mkdir()
    write_filtered_store(store, keep, tmp_path / "kept")
    write_rotation(tmp_path / "kept", store.rotation)
    record = store_record("int8", LENGTHS, rotated=True, blocks=store.ends)
    kept = VectorStore(tmp_path / "kept", record)
    assert kept.layout == "blocks"
    np.testing.assert_array_equal(np.asarray(kept.codes), np.asarray(store.codes)[keep])


def test_blocks_that_do_not_end_at_the_prefixes_are_refused(tmp_path: Path):
    written_store(tmp_path, gaussian_unit_rows(50, DIM, 0))
    record = store_record("int8", LENGTHS, rotated=True, blocks=(20, 44, 80, 96))
    record["lengths"] = [44, 80, 96]  # the blocks still end at 20
    record["norms"] = "store_norms.npy"
    with pytest.raises(StoreError, match="blocks ending at"):
        VectorStore(tmp_path, record)


def test_only_a_rotated_int8_store_is_kept_by_blocks(tmp_path: Path):
    with pytest.raises(StoreError, match="only a rotated int8 store"):
        StoreWriter(tmp_path, 10, DIM, LENGTHS, "float16", layout="blocks")


def test_a_store_kept_by_blocks_reads_any_batch_in_integers(tmp_path: Path):
    """The kernel beats the float scan for batches of any size (unlike the row layout's product,
    whose scoring costs work a query), so a batch longer than the head still reads in it."""
    store = written_store(tmp_path, gaussian_unit_rows(300, DIM, 0))
    plain = written_store(tmp_path / "rows", gaussian_unit_rows(300, DIM, 0), layout="rows")
    assert store.integer_scannable(20, 10, 64) and not plain.integer_scannable(20, 10, 64)
    assert not store.integer_scannable(30, 10, 1)  # not a block's end
    assert not store.integer_scannable(20, 0, 1)


def test_a_scan_of_several_chunks_answers_as_the_float_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Chunks of 1,024 rows (the least) over 2,101: the running k-th best carried across them."""
    monkeypatch.setattr(store_module, "KERNEL_BLOCK_BYTES", 1)
    store = written_store(tmp_path, gaussian_unit_rows(2101, DIM, 0))
    q = prefix_vectors(gaussian_unit_rows(3, DIM, 1), 44)
    got = store.scan(q, 44, 10)
    assert_same_answer(store, q, 44, got, float_scan(store, monkeypatch, q, 44, 10))
