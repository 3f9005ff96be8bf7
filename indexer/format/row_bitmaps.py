"""Row sets as packed bitmaps, a bundle's dense concepts kept as such bitmaps, and
`AllowedRows`, the set of rows a filter allows (listed or a bitmap, by its count), which the
engine's filtered searches take (service/engine/filtering.py).

A bitmap of N rows is uint8 [⌈N/8⌉], row r at bit r mod 8 of byte r // 8 (little bit order:
the layout FAISS's `IDSelectorBitmap` reads, so a bitmap is handed to a search as it is). Bits
past row N − 1 are always 0, so a bitmap's popcount is its number of rows. On bitmaps the set
algebra is bytewise (and, and-not, not: N/8 bytes, microseconds at a million rows), where
sorted id lists need a sort or a merge over every listed row.

`ConceptBitmaps` keeps, for a bundle's postings, the rows of every dense concept (at least
1/DENSE_SHARE of the rows) as a bitmap, built on the concept's first use and kept: the same
bitmap serves every later filter that names the concept — a search-time index over the
postings, the way a vector database keeps a bitmap per frequent payload value. The memory is
bounded by the postings themselves: a dense concept has ≥ N/32 entries of 4 bytes (2 of row
bits, 2 of activation; 8 in bundles written before), its bitmap N/8 bytes, so all bitmaps
together take at most as much as the postings' rows and values. Sparse concepts stay the
sorted id lists the postings already are.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cached_property
from threading import Lock

import faiss
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


@dataclass(frozen=True, eq=False)
class AllowedRows:
    """The rows a filter allows out of `total`, kept by cardinality: the sorted ids `rows`
    when few, else the bitmap `bits` (N/8 bytes, and FAISS's selector as it is).
    `AllowedRows(total, rows)` lists rows; `of_bits` and the set operators (`&`, `-`, `~`)
    choose the form of their result by its count."""

    total: int
    rows: np.ndarray | None = None
    bits: np.ndarray | None = None
    key: Hashable | None = (
        None  # the concept filter it is (service.engine.filtering.allowed_rows), for its block
    )

    def __post_init__(self) -> None:
        if (self.rows is None) == (self.bits is None):
            raise ValueError("AllowedRows holds either listed rows or a bitmap")

    @classmethod
    def of_bits(cls, total: int, bits: np.ndarray) -> AllowedRows:
        """A bitmap's rows: listed when they are few (under 1/DENSE_SHARE of the rows)."""
        allowed = cls(total, bits=bits)
        if allowed.count * DENSE_SHARE < total:
            return cls(total, rows_of_bits(total, bits))
        return allowed

    @classmethod
    def everything(cls, total: int) -> AllowedRows:
        return cls(total, bits=bits_complement(total, np.zeros(bitmap_bytes(total), np.uint8)))

    @classmethod
    def excluding(cls, total: int, rows: np.ndarray) -> AllowedRows:
        """Every row but the sorted unique `rows`."""
        return ~cls(total, np.asarray(rows, dtype=np.int64))

    def keyed(self, key: Hashable) -> AllowedRows:
        """The same rows as the concept filter `key` (service.engine.filtering.allowed_rows),
        their count kept."""
        keyed = replace(self, key=key)
        if "count" in self.__dict__:
            keyed.__dict__["count"] = self.count
        return keyed

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes if self.rows is not None else self.bits.nbytes)

    @cached_property
    def count(self) -> int:
        return len(self.rows) if self.rows is not None else bits_count(self.bits)

    def materialise(self) -> np.ndarray:
        """The allowed rows as a sorted int64 array."""
        if self.rows is not None:
            return self.rows
        return rows_of_bits(self.total, self.bits)

    def within(self, rows: np.ndarray) -> AllowedRows:
        """The rows allowed here and in the sorted set `rows` (a metadata filter's: service/
        metadata_filter.py)."""
        rows = np.asarray(rows, dtype=np.int64)
        return AllowedRows(self.total, rows[self.contains(rows)])

    def contains(self, rows: np.ndarray) -> np.ndarray:
        """A mask: which of `rows` are allowed."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.rows is not None:
            return np.isin(rows, self.rows)
        return bits_contain(self.bits, rows)

    def mask(self) -> np.ndarray:
        """Every row's allowed flag, bool [total]."""
        if self.bits is not None:
            return np.unpackbits(self.bits, count=self.total, bitorder="little").view(bool)
        mask = np.zeros(self.total, dtype=bool)
        mask[self.rows] = True
        return mask

    def bitmap(self) -> np.ndarray:
        """The allowed rows as a bitmap."""
        return self.bits if self.bits is not None else bits_of_rows(self.total, self.rows)

    def __and__(self, other: AllowedRows) -> AllowedRows:
        if self.rows is not None:
            return AllowedRows(self.total, self.rows[other.contains(self.rows)])
        if other.rows is not None:
            return AllowedRows(self.total, other.rows[self.contains(other.rows)])
        return AllowedRows.of_bits(self.total, np.bitwise_and(self.bits, other.bits))

    def __sub__(self, other: AllowedRows) -> AllowedRows:
        if self.rows is not None:
            return AllowedRows(self.total, self.rows[~other.contains(self.rows)])
        if other.rows is not None:
            return AllowedRows.of_bits(self.total, bits_clear(self.bits, other.rows))
        return AllowedRows.of_bits(self.total, self.bits & np.invert(other.bits))

    def __invert__(self) -> AllowedRows:
        return AllowedRows.of_bits(self.total, bits_complement(self.total, self.bitmap()))

    def selector(self) -> faiss.IDSelector:
        """A FAISS ID selector of the allowed rows (hold a reference while it is used): a hash
        set of listed rows when they are few (under 1/DENSE_SHARE of the rows), else a bitmap,
        whose test is one bit read — the set's own bitmap, not a copy."""
        if self.rows is not None and len(self.rows) * DENSE_SHARE < self.total:
            return faiss.IDSelectorBatch(np.ascontiguousarray(self.rows, dtype=np.int64))
        bits = np.ascontiguousarray(self.bitmap())
        selector = faiss.IDSelectorBitmap(self.total, faiss.swig_ptr(bits))
        selector.referenced = bits  # IDSelectorBitmap keeps a raw pointer: keep `bits` alive
        return selector
