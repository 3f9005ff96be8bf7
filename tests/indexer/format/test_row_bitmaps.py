"""Packed row bitmaps: the same sets as sorted id lists, and a concept's bitmap kept once."""

from __future__ import annotations

import numpy as np
import pytest

from indexer.format.row_bitmaps import (
    ConceptBitmaps,
    bits_clear,
    bits_complement,
    bits_contain,
    bits_count,
    bits_of_rows,
    rows_of_bits,
)


@pytest.mark.parametrize("total", [1, 8, 13, 1000, 1003])
@pytest.mark.parametrize("share", [0.0, 0.01, 0.5, 1.0])
def test_a_bitmap_holds_exactly_its_rows(total: int, share: float):
    rng = np.random.default_rng(total)
    rows = np.flatnonzero(rng.random(total) < share).astype(np.int64)  # sparse and dense paths
    bits = bits_of_rows(total, rows)
    assert bits.dtype == np.uint8 and len(bits) == (total + 7) // 8
    assert rows_of_bits(total, bits).tolist() == rows.tolist()
    assert bits_count(bits) == len(rows)
    probe = np.arange(total)
    assert bits_contain(bits, probe).tolist() == np.isin(probe, rows).tolist()
    others = np.setdiff1d(probe, rows)
    flipped = bits_complement(total, bits)
    assert rows_of_bits(total, flipped).tolist() == others.tolist()
    assert bits_count(flipped) == total - len(rows)  # the padding bits stay 0
    dropped = rows[::2]
    assert rows_of_bits(total, bits_clear(bits, dropped)).tolist() == rows[1::2].tolist()
    assert rows_of_bits(total, bits).tolist() == rows.tolist()  # bits_clear copied


def test_the_bitmap_is_the_layout_faiss_reads():
    """Row r at bit r mod 8 of byte r // 8 (IDSelectorBitmap's little bit order)."""
    import faiss

    rows = np.array([0, 9, 10, 17], dtype=np.int64)
    bits = bits_of_rows(20, rows)
    assert bits.tolist() == [0b00000001, 0b00000110, 0b00000010]
    selector = faiss.IDSelectorBitmap(20, faiss.swig_ptr(bits))
    assert [r for r in range(20) if selector.is_member(r)] == rows.tolist()


def test_dense_concepts_are_kept_as_bitmaps_sparse_ones_stay_rows():
    total = 3200
    postings = {0: np.arange(0, total, 2), 1: np.arange(5, 60, 7)}  # 1,600 rows, 8 rows
    reads: list[int] = []

    def rows_of(concept: int) -> np.ndarray:
        reads.append(concept)
        return postings[concept].astype(np.int64)

    bitmaps = ConceptBitmaps(total, rows_of)
    rows, bits = bitmaps.get(0)
    assert rows is None and rows_of_bits(total, bits).tolist() == postings[0].tolist()
    assert bitmaps.get(0)[1] is bits and reads == [0]  # built once, then kept
    rows, bits = bitmaps.get(1)
    assert bits is None and rows.tolist() == postings[1].tolist()
    assert bitmaps.size(0) == 1600 and bitmaps.size(1) == 8
    assert bitmaps.dense(100) and not bitmaps.dense(99)  # 1/32 of 3,200 rows
    bitmaps.forget()
    bitmaps.get(0)
    assert reads == [0, 1, 0]  # a cold start reads the postings again
    kept = bitmaps.get(0)[1]
    with bitmaps.cold():
        assert bitmaps.get(0)[1] is not kept and reads == [0, 1, 0, 0]  # built again inside
    assert bitmaps.get(0)[1] is kept and reads == [0, 1, 0, 0]  # the kept one is back
