"""A frequent filter's allowed rows kept together, so that its next search scans them in order.

An exact scan of a filter's allowed rows reads each row where the prefix index stores it: at a
million rows those reads are scattered, each waiting on the memory, so a word on 37,077 of 1M rows
took 5.6 ms a search at 24 dimensions (`benchmarks.service.filters.filter_latency --rows 1000000`),
where the unfiltered HNSW search takes 0.5 ms. A graph traversal that skips the other rows does not
find such a filter's top k (FAISS's selector keeps the graph's links, which lead mostly to rows the
filter excludes), and an IVF one needs nearly every list.

So the first search of a filter at a prefix copies its allowed rows' stored vectors into a block
of their own (float16, FAISS's scalar quantizer: [n, L] codes, with the rows it holds), and
every later search of that filter at that prefix scans the block: n·L contiguous codes, read at
the memory's bandwidth rather than its latency (float16: half float32's bytes to read), then
scores its best 2k + 32 rows again exactly from the index's own storage. That is a vector
database's per-value index for a frequent payload value, built on demand: a block is kept per
(filter, prefix), for one bundle version (the engine that holds it holds one), within a memory
budget, the least recently used dropped first. Which filters get one (`FilterBlocks.fits`):
those allowing at least BLOCK_MIN_ROWS rows (fewer are cheap to read where they lie) and at most
BLOCK_MAX_SHARE of the rows (a filter allowing most rows is served as well by the index's own
search, which skips the few others), whose block fits BLOCK_BYTES_MAX and the budget. The
answers are those of the exact scan they replace: every allowed row scored exactly, ties broken
by row.

The same cache keeps each concept filter's allowed rows (filtering.allowed_rows: its sorted rows
or its bitmap, under the concepts it requires and excludes), so a filter asked for again costs a
look-up instead of its set algebra: excluding a rare word from a million rows writes and counts
a 125 KB complement every time otherwise.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from threading import Lock
from typing import Any, TypeVar

import faiss
import numpy as np

T = TypeVar("T")

BLOCK_MIN_ROWS = 4096
BLOCK_MAX_SHARE = 0.25
BLOCK_BYTES_MAX = 64 * 2**20
BLOCK_BUDGET = 256 * 2**20  # the engine's default (EngineConfig.filter_block_bytes)
CODE_BYTES = 2  # float16
CANDIDATE_MARGIN = 32  # rows shortlisted beyond 2k by a block's float16 scan


@dataclass(frozen=True, eq=False)
class FilterBlock:
    """The stored vectors of a filter's allowed rows at one prefix, together: `index` holds
    them in the order of `rows` (sorted row ids) as float16 (FAISS's scalar quantizer), half
    the bytes to read of float32; its candidates are scored again exactly."""

    rows: np.ndarray
    index: faiss.IndexScalarQuantizer

    @classmethod
    def of(cls, rows: np.ndarray, vectors: np.ndarray) -> FilterBlock:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        index = faiss.IndexScalarQuantizer(
            vectors.shape[1], faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT
        )
        index.add(vectors)  # float16 needs no training
        return cls(np.asarray(rows, dtype=np.int64), index)

    @property
    def nbytes(self) -> int:
        return int(self.index.ntotal) * int(self.index.code_size) + self.rows.nbytes

    def search(
        self, query: np.ndarray, k: int, exact: Callable[[np.ndarray], np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The exact top k of the block's rows for one query [1, L]: ([1, k'], [1, k']),
        k' = min(k, rows), ties broken by row (as `exact_scan.exact_scores` breaks them). The
        float16 scan shortlists 2k + CANDIDATE_MARGIN rows; `exact(rows)` gives their exact
        scores (float16 moves a score by at most ~1e-3, far less than the gap to the
        shortlist's last)."""
        wanted = min(2 * int(k) + CANDIDATE_MARGIN, len(self.rows))
        _, found = self.index.search(np.ascontiguousarray(query, dtype=np.float32), wanted)
        rows = self.rows[found[0][found[0] >= 0]]
        scores = exact(rows)
        order = np.lexsort((rows, -scores))[:k]
        return scores[order][None, :].astype(np.float32), rows[order][None, :]


class FilterBlocks:
    """The blocks of one bundle version's filters, within `budget` bytes (module docstring).
    Safe to share between threads: a block is built outside the lock (two threads may build
    the same one; the first kept wins) and kept under it."""

    def __init__(self, budget: int = BLOCK_BUDGET) -> None:
        self.budget = int(budget)
        self._kept_values: OrderedDict[tuple[str, Hashable], Any] = OrderedDict()
        self._bytes = 0
        self._lock = Lock()

    def fits(self, count: int, length: int, total: int) -> bool:
        """Whether a filter allowing `count` of `total` rows gets a block at prefix `length`."""
        size = count * length * CODE_BYTES
        return BLOCK_MIN_ROWS <= count <= BLOCK_MAX_SHARE * total and size <= min(
            BLOCK_BYTES_MAX, self.budget
        )

    def get(
        self,
        key: Hashable,
        rows_of: Callable[[], np.ndarray],
        vectors_of: Callable[[np.ndarray], np.ndarray],
    ) -> FilterBlock:
        """The block kept under `key`, else one built from `rows_of()` (the sorted allowed
        rows) and `vectors_of(rows)` (their stored vectors [n, L]) and kept."""

        def build() -> FilterBlock:
            rows = rows_of()
            return FilterBlock.of(rows, vectors_of(rows))

        return self._kept(("block", key), build)

    def allowed(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The allowed rows kept for the concept filter `key`, else `compute()`'s, kept: a
        filter asked for again costs a look-up, not its set algebra (a complement alone is
        N/8 bytes to write and count)."""
        return self._kept(("rows", key), compute)

    def _kept(self, key: tuple[str, Hashable], build: Callable[[], T]) -> T:
        """The value kept under `key`, else `build()`'s, kept; the least recently used
        values (blocks and allowed rows alike, each `nbytes`) dropped to stay within the
        budget."""
        with self._lock:
            value = self._kept_values.get(key)
            if value is not None:
                self._kept_values.move_to_end(key)
                return value
        value = build()
        with self._lock:
            if key in self._kept_values:  # another thread kept one meanwhile
                return self._kept_values[key]
            self._kept_values[key] = value
            self._bytes += value.nbytes
            while self._bytes > self.budget and len(self._kept_values) > 1:
                _, dropped = self._kept_values.popitem(last=False)
                self._bytes -= dropped.nbytes
        return value

    @property
    def kept_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._kept_values)

    def keys(self, kind: str = "block") -> list[Hashable]:
        """The keys of the kept values of a kind ("block", "rows"), least recently used first."""
        with self._lock:
            return [key for k, key in self._kept_values if k == kind]

    def forget(self) -> None:
        """Drop every block (a cold start: each filter's next search builds its own)."""
        with self._lock:
            self._kept_values.clear()
            self._bytes = 0

    @contextmanager
    def cold(self) -> Iterator[None]:
        """Inside, no block is kept yet (what a filter's first search costs); after, the
        blocks kept before are back and those built inside are dropped (a benchmark's cold
        arm, which must not cool its warm ones)."""
        with self._lock:
            kept, self._kept_values = self._kept_values, OrderedDict()
            kept_bytes, self._bytes = self._bytes, 0
        try:
            yield
        finally:
            with self._lock:
                self._kept_values, self._bytes = kept, kept_bytes
