"""Concept postings: for every signed CEDAR concept, the gallery rows where it is active.

Each gallery row x has k active concepts (ConceptCoder.encode: ids c ∈ [0, 2D), 2j = +axis j,
2j + 1 = −axis j, and activations a = |(U(x − b))_j| ≥ 0; the readout's word concepts follow
from 2D on). The postings are the transpose of that [N, k] table, stored as CSR whose row ids
are split roaring-style into 65,536-row chunks: a chunk number per (concept, chunk) range in a
small table, the low 16 bits per entry.

    postings_indptr.npy   int64   [C + 1]      indptr[0] = 0, non-decreasing, indptr[-1] = E
                                               (E = N·k entries, plus the word concepts')
    postings_rows.npy     uint16  [E]          row & 0xFFFF, the low bits of each row id;
                                               concept c's entries are rows[indptr[c]:indptr[c + 1]]
    postings_chunks.npy   int64   [C, H + 1]   H = ⌈N / 65,536⌉ (at least 1): chunks[c, h] is
                                               the entry where concept c's rows ≥ h·65,536
                                               begin; chunks[c, 0] = indptr[c],
                                               chunks[c, H] = indptr[c + 1], non-decreasing
    postings_values.npy   float16 [E]          the matching activations, ≥ 0 and finite

A concept's rows decode as `np.repeat(np.arange(H) << 16, np.diff(chunks[c])) + lows` (int64),
strictly increasing (a row lists a concept once). An entry costs 4 B (2 B of row, 2 B of
activation): 128 B a row at k = 32, plus the chunk table's C·(H + 1)·8 B (at 1M rows and
1,024 concepts 139 kB, 0.14 B a row). Before, an entry cost 8 B (256 B a row at k = 32).

Bundles written before keep that older CSR, which loads, verifies and serves unchanged: no
chunk file, postings_rows.npy the absolute row ids (int32, uint32 or int64: the narrowest that
held row N − 1, int64 before that), postings_values.npy float32. `Postings` reads both; every
reader takes row ids through `decode_rows` (`Postings.rows[a:b]`, `Postings.get`), never from
the stored array. Every bundle written now (full build, `strata index add`, `strata index
delete`, whatever the base's format) is written in the compact format.

Built shard by shard: `shard_postings` (pure) turns a shard's codes into a run sorted by
concept (the build makes the same run straight from the embeddings, indexer/format/codes.py);
`csr_from_runs` merges runs in RAM, indexer/format/postings_writer.py streams the merge to disk
(and filters a version's postings for a delete).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from indexer.format.mapped import advise_random, release_rows

INDPTR, ROWS, VALUES = "postings_indptr.npy", "postings_rows.npy", "postings_values.npy"
CHUNKS = "postings_chunks.npy"
FILES = (INDPTR, ROWS, CHUNKS, VALUES)  # what a bundle written now holds
LEGACY_FILES = (INDPTR, ROWS, VALUES)  # a bundle written before the chunk table
CHECK_CHUNK = 4 * 2**20
# stored ids a binary search reads per (concept, row) pair, about: past len(rows) × concepts ×
# this many, one pass over the entries reads fewer (Postings.entries_of_rows)
SEARCH_READS = 16

CHUNK_BITS = 16
CHUNK_ROWS = 1 << CHUNK_BITS  # 65,536 rows a chunk
LOW_DTYPE, VALUE_DTYPE = np.dtype("<u2"), np.dtype("<f2")
# a stored float16 activation s of a: |s − a| ≤ VALUE_RTOL·|a| + VALUE_ATOL (round to nearest:
# half an ulp, 2⁻¹¹ relative for normal numbers, half the subnormal spacing 2⁻²⁴ below them)
VALUE_RTOL, VALUE_ATOL = 2.0**-11, 2.0**-25


def chunk_count(rows: int) -> int:
    """H, the 65,536-row chunks of row ids 0 .. rows − 1 (at least 1)."""
    return max(1, -(-int(rows) // CHUNK_ROWS))


def row_lows(rows: np.ndarray) -> np.ndarray:
    """The stored part of row ids: their low 16 bits, uint16."""
    return (np.asarray(rows, dtype=np.int64) & (CHUNK_ROWS - 1)).astype(LOW_DTYPE)


def stored_values(values: np.ndarray) -> np.ndarray:
    """Activations as stored: float16 (rounded to nearest); ValueError past float16's range."""
    stored = np.asarray(values, dtype=np.float32).astype(VALUE_DTYPE)
    if not np.isfinite(stored).all():
        raise ValueError("activations must be finite and within float16's range (±65,504)")
    return stored


def chunk_counts(indptr: np.ndarray, rows: np.ndarray, chunks: int) -> np.ndarray:
    """Entries per (concept, chunk) [c, chunks] of consecutive concepts whose CSR offsets are
    `indptr` [c + 1] and whose entries, indptr[0] to indptr[-1], hold the absolute row ids
    `rows`."""
    indptr = np.asarray(indptr, dtype=np.int64)
    rows = np.asarray(rows, dtype=np.int64)
    concepts = len(indptr) - 1
    if len(rows) != indptr[-1] - indptr[0]:
        raise ValueError(f"{len(rows)} rows for entries {indptr[0]} .. {indptr[-1]}")
    highs = rows >> CHUNK_BITS
    if len(rows) and (rows.min() < 0 or highs.max() >= chunks):
        raise ValueError(f"row ids must lie in [0, {chunks * CHUNK_ROWS}) ({chunks} chunks)")
    owner = np.repeat(np.arange(concepts, dtype=np.int64), np.diff(indptr))
    per_chunk = np.bincount(owner * chunks + highs, minlength=concepts * chunks)
    return per_chunk.reshape(concepts, chunks).astype(np.int64)


def chunk_table(counts: np.ndarray, first_entry: int = 0) -> np.ndarray:
    """The chunk table [c, H + 1] of consecutive concepts with `counts` [c, H] entries per
    (concept, chunk), the first concept's entries starting at `first_entry`."""
    concepts, chunks = counts.shape
    table = np.empty((concepts, chunks + 1), dtype=np.int64)
    ends = first_entry + np.cumsum(counts.reshape(-1)).reshape(concepts, chunks)
    table[:, 1:] = ends
    table[:, 0] = first_entry
    table[1:, 0] = ends[:-1, -1]
    return table


def chunk_highs(chunks: np.ndarray, start: int, stop: int) -> np.ndarray:
    """h·65,536 (int64) for each entry of [start, stop): the chunk its row lies in, read from
    the chunk table (one repeat over the (concept, chunk) ranges the entries span)."""
    ends = chunks[:, -1]
    first = int(np.searchsorted(ends, start, side="right"))  # the first concept ending after
    last = int(np.searchsorted(chunks[:, 0], stop, side="left"))  # past the last starting before
    spans = np.diff(np.clip(chunks[first:last], start, stop), axis=1)
    per_concept = np.arange(chunks.shape[1] - 1, dtype=np.int64) << CHUNK_BITS
    return np.repeat(np.tile(per_concept, max(0, last - first)), spans.reshape(-1))


def decode_rows(lows: np.ndarray, chunks: np.ndarray, start: int) -> np.ndarray:
    """The absolute row ids (int64) of the entries start, start + 1, ... whose stored low bits
    are `lows`: the one decode of the compact format."""
    lows = np.asarray(lows)
    highs = chunk_highs(chunks, start, start + len(lows))
    if len(highs) != len(lows):
        raise ValueError(f"{CHUNKS} covers {len(highs)} of entries {start} .. {start + len(lows)}")
    highs += lows
    return highs


class DecodedRows:
    """A CSR's row ids by entry, decoded when sliced: `rows[a:b]` → int64 absolute ids (the
    chunk table's high bits added to the stored lows; an older file's ids widened)."""

    def __init__(self, stored: np.ndarray, chunks: np.ndarray | None) -> None:
        self.stored, self.chunks = stored, chunks

    def __len__(self) -> int:
        return len(self.stored)

    def __getitem__(self, entries: slice) -> np.ndarray:
        if not isinstance(entries, slice):
            raise TypeError("postings rows are read by entry range (rows[a:b])")
        start, stop, step = entries.indices(len(self.stored))
        if step != 1:
            raise ValueError("postings rows are read by contiguous entry range")
        stop = max(start, stop)
        if self.chunks is None:
            return np.asarray(self.stored[start:stop], dtype=np.int64)
        return decode_rows(self.stored[start:stop], self.chunks, start)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        rows = self[:]
        return rows if dtype is None else rows.astype(dtype, copy=False)


class DecodedValues:
    """A CSR's activations by entry, float32 when read (stored float16, or float32 before):
    `values[a:b]` an entry range, `values[entries]` the given entries only (an int array: the
    pages holding them are all that is read)."""

    def __init__(self, stored: np.ndarray) -> None:
        self.stored = stored

    def __len__(self) -> int:
        return len(self.stored)

    def __getitem__(self, entries: slice | np.ndarray) -> np.ndarray:
        if not isinstance(entries, slice | np.ndarray):
            raise TypeError("postings values are read by entry range or entry array")
        return np.asarray(self.stored[entries], dtype=np.float32)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return np.asarray(self.stored, dtype=np.float32 if dtype is None else dtype)


@dataclass
class PostingRun:
    """One shard's postings: entries grouped by concept, rows ascending within a concept."""

    counts: np.ndarray  # int64 [C]: entries per concept
    rows: np.ndarray  # int64 [E]
    values: np.ndarray  # float32 [E]


def shard_postings(
    concepts: np.ndarray, activations: np.ndarray, first_row: int, n_concepts: int
) -> PostingRun:
    """The run of a shard whose rows are first_row, first_row + 1, ... (codes [n, k] each)."""
    concepts = np.asarray(concepts, dtype=np.int64)
    activations = np.asarray(activations, dtype=np.float32)
    if concepts.shape != activations.shape or concepts.ndim != 2:
        raise ValueError(f"codes {concepts.shape} and activations {activations.shape} differ")
    if concepts.size and (concepts.min() < 0 or concepts.max() >= n_concepts):
        raise ValueError(f"concept ids must lie in [0, {n_concepts})")
    n, k = concepts.shape
    flat = concepts.reshape(-1)
    order = np.argsort(flat, kind="stable")  # stable: row order kept within a concept
    rows = np.repeat(np.arange(first_row, first_row + n, dtype=np.int64), k)
    return PostingRun(
        counts=np.bincount(flat, minlength=n_concepts).astype(np.int64),
        rows=rows[order],
        values=activations.reshape(-1)[order],
    )


def scatter_positions(run: PostingRun, cursor: np.ndarray) -> np.ndarray:
    """Where each entry of a run goes in the CSR arrays, given the next free slot per concept."""
    run_starts = np.concatenate([[0], np.cumsum(run.counts)[:-1]])
    within = np.arange(len(run.rows), dtype=np.int64) - np.repeat(run_starts, run.counts)
    return np.repeat(cursor, run.counts) + within


def csr_from_runs(
    runs: Sequence[PostingRun], n_concepts: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, rows, values) of runs given in row order, merged in RAM."""
    totals = sum((r.counts for r in runs), np.zeros(n_concepts, dtype=np.int64))
    indptr = np.concatenate([[0], np.cumsum(totals)]).astype(np.int64)
    rows = np.empty(indptr[-1], dtype=np.int64)
    values = np.empty(indptr[-1], dtype=np.float32)
    cursor = indptr[:-1].copy()
    for run in runs:
        at = scatter_positions(run, cursor)
        rows[at], values[at] = run.rows, run.values
        cursor += run.counts
    return indptr, rows, values


def csr_run(indptr: np.ndarray, rows: np.ndarray, values: np.ndarray) -> PostingRun:
    """CSR postings as a run (they are grouped by concept with rows ascending, as a run is)."""
    return PostingRun(np.diff(np.asarray(indptr)).astype(np.int64), rows, values)


def entry_concepts(indptr: np.ndarray, start: int, stop: int) -> np.ndarray:
    """The concept of each CSR entry in [start, stop)."""
    return np.searchsorted(indptr, np.arange(start, stop), side="right").astype(np.int64) - 1


RunReader = Callable[[int, int], tuple[np.ndarray, np.ndarray]]


class Postings:
    """A bundle's postings, read memory-mapped: `get(concept)` → (int64 rows, float32
    activations); `rows[a:b]` and `values[a:b]` the same decoded per entry range. Reads both
    formats: the compact one (a chunk file) and the older absolute ids with float32 values.

    Filters read rows only; activations are read for the entries of the rows an explanation
    shows (`entries_of_rows`). With `values_on_disk` (a bundle built `--store-on-disk`) the
    activations are mapped for random reads (a page fault reads its page alone), so a replica
    holds only the pages its explanations touched (indexer/format/footprint.py)."""

    def __init__(self, folder: Path, values_on_disk: bool = False) -> None:
        self.indptr = np.load(folder / INDPTR, allow_pickle=False)
        self.stored_rows = np.load(folder / ROWS, mmap_mode="r", allow_pickle=False)
        self.stored_values = np.load(folder / VALUES, mmap_mode="r", allow_pickle=False)
        if values_on_disk:
            advise_random(self.stored_values)
        chunk_file = folder / CHUNKS
        self.chunks = np.load(chunk_file, allow_pickle=False) if chunk_file.is_file() else None
        self.rows = DecodedRows(self.stored_rows, self.chunks)
        self.values = DecodedValues(self.stored_values)

    @property
    def concepts(self) -> int:
        return len(self.indptr) - 1

    @property
    def entries(self) -> int:
        return int(self.indptr[-1])

    @property
    def files(self) -> tuple[str, ...]:
        """The files these postings are read from (the older format has no chunk file)."""
        return LEGACY_FILES if self.chunks is None else FILES

    def get(self, concept: int) -> tuple[np.ndarray, np.ndarray]:
        start, stop = self._range(concept)
        return self.rows[start:stop], self.values[start:stop]

    def rows_of(self, concept: int) -> np.ndarray:
        """The concept's rows alone (int64 ascending): what a filter reads, no activation."""
        start, stop = self._range(concept)
        return self.rows[start:stop]

    def _range(self, concept: int) -> tuple[int, int]:
        if not 0 <= concept < self.concepts:
            raise IndexError(f"concept {concept} outside [0, {self.concepts})")
        return int(self.indptr[concept]), int(self.indptr[concept + 1])

    def entries_of_rows(
        self, wanted: np.ndarray, first: int = 0, stop: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, concept, activation) of every entry of concepts [first, stop) whose row is one
        of `wanted`, in concept order (rows ascending within one): a few rows are found by a
        binary search in each concept's postings (`located_entries`, no posting decoded),
        many by one pass over the entries (`entries_of_rows`), whichever reads fewer."""
        stop = self.concepts if stop is None else stop
        wanted = np.unique(np.asarray(wanted, dtype=np.int64))
        span = int(self.indptr[stop] - self.indptr[first])
        if len(wanted) * (stop - first) * SEARCH_READS >= span:
            indptr = self.indptr[: stop + 1]
            return entries_of_rows(indptr, self.rows, self.values, first, wanted)
        at, concepts, entries = located_entries(
            self.indptr, self.stored_rows, self.chunks, first, stop, wanted
        )
        values = np.asarray(self.stored_values[entries], dtype=np.float32)
        return wanted[at], concepts, values


def located_entries(
    indptr: np.ndarray,
    stored_rows: np.ndarray,
    chunks: np.ndarray | None,
    first: int,
    stop: int,
    wanted: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(position in `wanted`, concept, entry) of every entry of concepts [first, stop) whose
    row is one of `wanted`, concept by concept: one binary search per (concept, row) pair, all
    pairs a step at a time, inside the pair's sorted range of stored ids (the concept's entries
    in the row's 65,536-row chunk, its low 16 bits sought; the whole concept in the older
    format, its id sought). Reads about log₂(range) stored ids a pair."""
    wanted = np.asarray(wanted, dtype=np.int64)
    concept = np.repeat(np.arange(first, stop, dtype=np.int64), len(wanted))
    at = np.tile(np.arange(len(wanted), dtype=np.int64), stop - first)
    row = wanted[at]
    if chunks is None:
        low, high, sought = indptr[concept], indptr[concept + 1], row
    else:
        chunk = row >> CHUNK_BITS
        low, high = chunks[concept, chunk], chunks[concept, chunk + 1]
        sought = row & (CHUNK_ROWS - 1)
    low, high, end = low.astype(np.int64), high.astype(np.int64), high.astype(np.int64)
    searching = np.flatnonzero(low < high)
    while len(searching):  # the first entry ≥ the sought id, in each pair's range
        middle = (low[searching] + high[searching]) // 2
        below = np.asarray(stored_rows[middle]) < sought[searching]
        low[searching] = np.where(below, middle + 1, low[searching])
        high[searching] = np.where(below, high[searching], middle)
        searching = searching[low[searching] < high[searching]]
    hit = np.flatnonzero(low < end)
    hit = hit[np.asarray(stored_rows[low[hit]]) == sought[hit]]
    return at[hit], concept[hit], low[hit]


def entries_of_rows(
    indptr: np.ndarray,
    rows: Any,
    values: Any,
    first_concept: int,
    wanted: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, concept, value) of every entry of concepts first_concept up to the last of
    `indptr` whose row is one of `wanted`: one pass over those concepts' rows, in concept
    order, the values read at the found entries alone (`rows`, `values`: arrays, or a
    `Postings`' decoded views)."""
    start, stop = int(indptr[first_concept]), int(indptr[-1])
    tail = np.asarray(rows[start:stop])
    at = np.flatnonzero(np.isin(tail, np.asarray(wanted, dtype=np.int64)))
    concepts = np.searchsorted(indptr, start + at, side="right") - 1
    found_values = np.asarray(values[start + at], dtype=np.float32)
    return tail[at].astype(np.int64), concepts.astype(np.int64), found_values


def chunk_table_faults(chunks: np.ndarray, indptr: np.ndarray, n_rows: int) -> list[str]:
    """Every inconsistency of a chunk table with the CSR offsets of n_rows rows: its shape
    [C, H + 1], its ranges monotone, each concept's first and last offset indptr's."""
    expected = (len(indptr) - 1, chunk_count(n_rows) + 1)
    if chunks.dtype.kind not in "iu" or chunks.shape != expected:
        return [
            f"{CHUNKS}: {chunks.dtype} {list(chunks.shape)}, expected int64 [concepts, "
            f"⌈rows / 65,536⌉ + 1] = {list(expected)}"
        ]
    faults = []
    if (np.diff(chunks, axis=1) < 0).any():
        concept = int(np.flatnonzero((np.diff(chunks, axis=1) < 0).any(axis=1))[0])
        faults.append(f"{CHUNKS}: concept {concept}'s chunk offsets are not monotone")
    disagree = (chunks[:, 0] != indptr[:-1]) | (chunks[:, -1] != indptr[1:])
    if disagree.any():
        c, count = int(np.flatnonzero(disagree)[0]), int(disagree.sum())
        faults.append(
            f"{CHUNKS}: concept {c} spans entries {chunks[c, 0]} .. {chunks[c, -1]}, "
            f"{INDPTR} says {indptr[c]} .. {indptr[c + 1]}"
            + (f" ({count} concepts disagree)" if count > 1 else "")
        )
    return faults


def postings_faults(
    indptr: np.ndarray,
    rows: np.ndarray,
    values: np.ndarray,
    n_rows: int,
    k: int,
    axis_concepts: int | None = None,
    chunks: np.ndarray | None = None,
) -> list[str]:
    """Every inconsistency of CSR postings over n_rows rows with k axis concepts per row (read
    in chunks, so memory stays bounded by the chunk and a count per row). The first
    `axis_concepts` concepts (None: all) are the CEDAR axes, k per row; the word concepts after
    them hold any number of rows each. `rows` and `values` are the stored arrays: with the
    chunk table `chunks`, rows' low 16 bits (the compact format, checked as decoded), else
    absolute row ids (the older format)."""
    faults = []
    if indptr.ndim != 1 or len(indptr) < 2 or indptr[0] != 0:
        return [f"{INDPTR}: must be 1-d, start at 0 (shape {indptr.shape})"]
    if (np.diff(indptr) < 0).any():
        faults.append(f"{INDPTR}: not monotone")
    if not (indptr[-1] == len(rows) == len(values)):
        faults.append(
            f"{INDPTR} ends at {indptr[-1]}, but {ROWS} has {len(rows)} and {VALUES} "
            f"{len(values)} entries"
        )
        return faults
    row_kind, value_kind = np.dtype(rows.dtype), np.dtype(values.dtype)
    if chunks is not None and row_kind != LOW_DTYPE:
        return [*faults, f"{ROWS}: {row_kind} beside {CHUNKS}, expected the uint16 low bits"]
    if chunks is None and (row_kind == LOW_DTYPE or row_kind.kind not in "iu"):
        return [*faults, f"{ROWS}: {row_kind} row ids without {CHUNKS}"]
    if value_kind.kind != "f" or value_kind.itemsize not in (2, 4):
        return [*faults, f"{VALUES}: {value_kind}, expected float16 (float32 before)"]
    if chunks is not None and (table := chunk_table_faults(chunks, indptr, n_rows)):
        return [*faults, *table]  # (a table that agrees with indptr makes indptr monotone)

    def read(start: int, stop: int) -> np.ndarray:
        if chunks is None:
            return np.asarray(rows[start:stop], dtype=np.int64)
        return decode_rows(rows[start:stop], chunks, start)

    axes = len(indptr) - 1 if axis_concepts is None else axis_concepts
    if not 0 < axes < len(indptr):
        return [f"{INDPTR}: {len(indptr) - 1} concepts, fewer than the {axes} axes"]
    axis_entries = int(indptr[axes])
    if axis_entries != n_rows * k:
        faults.append(f"{ROWS}: {axis_entries} axis entries, expected rows·k = {n_rows}·{k}")
    starts = indptr[1:-1]
    per_row = np.zeros(n_rows, dtype=np.int64)
    for start in range(0, len(rows), CHECK_CHUNK):
        chunk = read(start, min(start + CHECK_CHUNK + 1, len(rows)))
        if chunk.min() < 0 or chunk.max() >= n_rows:
            faults.append(f"{ROWS}: row ids outside [0, {n_rows})")
            return faults
        body = chunk[: max(0, min(CHECK_CHUNK, axis_entries - start))]
        per_row += np.bincount(body, minlength=n_rows)
        # step i goes from entry start + i to start + i + 1; it may descend only where a
        # concept starts, at start + i + 1
        unsorted = np.diff(chunk) <= 0
        unsorted[starts[(starts > start) & (starts < start + len(chunk))] - start - 1] = False
        if unsorted.any():
            faults.append(f"{ROWS}: rows not strictly increasing within a concept")
            break
        vals = np.asarray(values[start : start + CHECK_CHUNK])
        if not np.isfinite(vals).all() or (vals < 0).any():
            faults.append(f"{VALUES}: activations must be finite and ≥ 0")
            break
        for mapped in (rows, values):  # a check reads each page once: none stays resident
            release_rows(mapped, start, start + CHECK_CHUNK)
    if not faults and (per_row != k).any():
        bad = int(np.flatnonzero(per_row != k)[0])
        faults.append(f"{ROWS}: row {bad} appears {per_row[bad]} times, expected k = {k}")
    return faults
