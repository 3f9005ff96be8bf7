"""Row sets as packed bitmaps, and a bundle's dense concepts kept as such bitmaps.

A bitmap of N rows is uint8 [⌈N/8⌉], row r at bit r mod 8 of byte r // 8 (little bit order:
the layout FAISS's `IDSelectorBitmap` reads, so a bitmap is handed to a search as it is). Bits
past row N − 1 are always 0, so a bitmap's popcount is its number of rows. On bitmaps the set
algebra is bytewise (and, and-not, not: N/8 bytes, microseconds at a million rows), where
sorted id lists need a sort or a merge over every listed row.

`ConceptBitmaps` keeps, for a bundle's postings, the rows of every dense concept (at least
1/DENSE_SHARE of the rows) as a bitmap, built on the concept's first use and kept: the same
bitmap serves every later filter that names the concept — a search-time index over the
postings, the way a vector database keeps a bitmap per frequent payload value. The memory is
bounded by the postings themselves: a dense concept has ≥ N/32 entries of 4 bytes, its bitmap
N/8 bytes, so all bitmaps together take at most as much as postings_rows.npy. Sparse concepts
stay the sorted id lists the postings already are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from threading import Lock

import numpy as np

DENSE_SHARE = 32  # a concept on ≥ 1/32 of the rows is kept as a bitmap (N/8 bytes ≤ 4·entries)


def bitmap_bytes(total: int) -> int:
    return (int(total) + 7) // 8


def bits_of_rows(total: int, rows: np.ndarray) -> np.ndarray:
    """The bitmap of the (unique) rows out of `total`."""
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) * 8 >= total:  # dense: one bool scatter and a pack beat a per-row bit or
        mask = np.zeros(total, dtype=bool)
        mask[rows] = True
        return np.packbits(mask, bitorder="little")
    bits = np.zeros(bitmap_bytes(total), dtype=np.uint8)
    np.bitwise_or.at(bits, rows >> 3, np.left_shift(1, rows & 7).astype(np.uint8))
    return bits


def rows_of_bits(total: int, bits: np.ndarray) -> np.ndarray:
    """The sorted rows (int64) a bitmap holds."""
    return np.flatnonzero(np.unpackbits(bits, count=total, bitorder="little")).astype(np.int64)


def bits_count(bits: np.ndarray) -> int:
    """How many rows a bitmap holds (its popcount)."""
    return int(np.bitwise_count(bits.view(np.uint8)).sum(dtype=np.int64))


def bits_contain(bits: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """bool [len(rows)]: which rows the bitmap holds (rows in [0, total))."""
    rows = np.asarray(rows, dtype=np.int64)
    return ((bits[rows >> 3] >> (rows & 7).astype(np.uint8)) & 1).astype(bool)


def bits_complement(total: int, bits: np.ndarray) -> np.ndarray:
    """Every row of [0, total) the bitmap does not hold (the padding bits kept 0)."""
    flipped = np.invert(bits)
    if total % 8:
        flipped[-1] &= np.uint8((1 << (total % 8)) - 1)
    return flipped


def bits_clear(bits: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """A copy of the bitmap without the (unique) rows."""
    rows = np.asarray(rows, dtype=np.int64)
    out = bits.copy()
    np.bitwise_and.at(out, rows >> 3, np.invert(np.left_shift(1, rows & 7).astype(np.uint8)))
    return out


class ConceptBitmaps:
    """The dense concepts of one bundle version as bitmaps (module docstring); `rows_of`
    (concept → its sorted rows) reads the postings. Safe to share between threads."""

    def __init__(self, total: int, rows_of: Callable[[int], np.ndarray]) -> None:
        self.total = int(total)
        self.rows_of = rows_of
        self._bits: dict[int, np.ndarray] = {}
        self._sizes: dict[int, int] = {}
        self._lock = Lock()

    def dense(self, size: int) -> bool:
        """Whether a set of `size` rows is dense enough to be a bitmap."""
        return size * DENSE_SHARE >= self.total

    def size(self, concept: int) -> int:
        """How many rows the concept is active on."""
        if concept not in self._sizes:
            self.get(concept)
        return self._sizes[concept]

    def get(self, concept: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(rows, None) of a sparse concept, (None, bitmap) of a dense one; a dense concept's
        bitmap is built once, on its first use."""
        bits = self._bits.get(concept)
        if bits is not None:
            return None, bits
        rows = self.rows_of(concept)
        self._sizes[concept] = len(rows)
        if not self.dense(len(rows)):
            return rows, None
        bits = bits_of_rows(self.total, rows)
        with self._lock:
            bits = self._bits.setdefault(concept, bits)
        return None, bits

    def forget(self) -> None:
        """Drop the kept bitmaps (a cold start: the next use of each concept builds its own)."""
        with self._lock:
            self._bits.clear()

    @contextmanager
    def cold(self) -> Iterator[None]:
        """Inside, no bitmap is kept yet (what a first use costs); after, the bitmaps kept
        before are back and those built inside are dropped (a benchmark's cold arm, which
        must not cool its warm ones)."""
        with self._lock:
            kept, self._bits = self._bits, {}
        try:
            yield
        finally:
            with self._lock:
                self._bits = kept
