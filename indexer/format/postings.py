"""Concept postings: for every signed CEDAR concept, the gallery rows where it is active.

Each gallery row x has k active concepts (ConceptCoder.encode: ids c ∈ [0, 2D), 2j = +axis j,
2j + 1 = −axis j, and activations a = |(U(x − b))_j| ≥ 0). The postings are the transpose of
that [N, k] table, stored as CSR:

    postings_indptr.npy   int64   [2D + 1]   indptr[0] = 0, non-decreasing, indptr[-1] = N·k
    postings_rows.npy     int32   [N·k]      rows of concept c: rows[indptr[c]:indptr[c + 1]],
                                             strictly increasing (a row lists a concept once);
                                             the narrowest of int32, uint32, int64 that holds
                                             row N − 1 (`row_dtype`; int64 before)
    postings_values.npy   float32 [N·k]      the matching activations, ≥ 0

Built shard by shard: `shard_postings` (pure) turns a shard's codes into a run sorted by
concept (the build makes the same run straight from the embeddings, indexer/format/codes.py);
`PostingsWriter` keeps only the per-concept counts in RAM, spills each run to work files, and
at the end merges the runs block of concepts by block and writes the files front to back,
hashing them on the way (shards arrive in row order, so rows stay sorted within each concept).
`csr_from_runs` is the same merge in RAM.

Incremental updates (indexer/update/rows.py): an existing CSR is itself a valid run of rows
[0, N), so `strata index add` opens `PostingsWriter(..., base=old postings)` — the old entries
come first in each block, then the new shards' runs — which gives exactly
`csr_from_runs([old, *new])`. `strata index delete` calls `filter_postings`: entries of removed
rows are dropped and the others renumbered, in one streaming pass (renumbering keeps the order
of rows, so every concept's rows stay strictly increasing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib.format import dtype_to_descr, open_memmap, write_array_header_1_0

from training.core.files import HashedFile, fsync_file

INDPTR, ROWS, VALUES = "postings_indptr.npy", "postings_rows.npy", "postings_values.npy"
FILES = (INDPTR, ROWS, VALUES)
CHECK_CHUNK = 4 * 2**20


def row_dtype(rows: int) -> np.dtype:
    """The narrowest integer type holding row ids 0 .. rows − 1: int32, uint32, else int64."""
    if rows <= 2**31:
        return np.dtype("<i4")
    if rows <= 2**32:
        return np.dtype("<u4")
    return np.dtype("<i8")


MERGE_BLOCK = 4 * 2**20  # entries per block of PostingsWriter.close (48 MB of rows and values)


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


@dataclass(frozen=True)
class SpilledRun:
    """A run written to the work folder: counts kept in RAM, rows and values as raw files."""

    counts: np.ndarray  # int64 [C]
    rows: Path  # int64, raw little-endian
    values: Path  # float32, raw little-endian

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Entries [start, stop) (read, not mapped: what is read is freed after the block)."""
        n = stop - start
        return (
            np.fromfile(self.rows, dtype="<i8", count=n, offset=8 * start),
            np.fromfile(self.values, dtype="<f4", count=n, offset=4 * start),
        )


class PostingsWriter:
    """Accumulates shard runs on disk (`work/`), then writes the three CSR files front to back.

    `close` walks the concepts in blocks of about MERGE_BLOCK entries: each run's entries of
    the block's concepts are scattered into the block (runs in row order, so rows stay
    ascending within a concept), and the block is appended to postings_rows.npy and
    postings_values.npy with their sha256 computed on the way. In RAM: the per-run counts and
    one block (a concept with more entries than MERGE_BLOCK is one block of its own).

    With `base` (a bundle's postings), the output starts from those entries — rows [0, N) of
    the base — and the runs added must hold the rows after them (an incremental add).
    `rows`: the version's row count, which sets the row ids' dtype (`row_dtype`; None: bounded
    by the entries)."""

    def __init__(
        self,
        folder: Path,
        work: Path,
        n_concepts: int,
        base: Postings | None = None,
        rows: int | None = None,
    ) -> None:
        self.folder, self.work, self.n_concepts = folder, work, n_concepts
        self.rows = rows
        if base is not None and base.concepts != n_concepts:
            raise ValueError(f"base postings have {base.concepts} concepts, not {n_concepts}")
        self.base = base
        self.base_counts = (
            np.zeros(n_concepts, dtype=np.int64)
            if base is None
            else np.diff(base.indptr).astype(np.int64)
        )
        self.totals = self.base_counts.copy()
        self.runs: list[SpilledRun] = []

    def add(self, run: PostingRun) -> None:
        counts = np.asarray(run.counts, dtype=np.int64)
        if len(counts) != self.n_concepts or not len(run.rows) == len(run.values) == counts.sum():
            raise ValueError(
                f"a run of {len(counts)} concepts, {len(run.rows)} rows and {len(run.values)} "
                f"values does not fit {self.n_concepts} concepts"
            )
        stem = self.work / f"postings-run-{len(self.runs):05d}"
        spilled = SpilledRun(counts.copy(), stem.with_suffix(".rows"), stem.with_suffix(".values"))
        np.ascontiguousarray(run.rows, dtype="<i8").tofile(spilled.rows)
        np.ascontiguousarray(run.values, dtype="<f4").tofile(spilled.values)
        self.runs.append(spilled)
        self.totals += counts

    def close(self) -> dict[Path, str]:
        """Write and fsync the three files, remove the work files; path → sha256."""
        indptr = np.concatenate([[0], np.cumsum(self.totals)]).astype(np.int64)
        entries = int(indptr[-1])
        sources: list[tuple[np.ndarray, RunReader]] = []
        if self.base is not None:
            base = self.base
            sources.append((self.base_counts, lambda a, b: (base.rows[a:b], base.values[a:b])))
        sources += [(run.counts, run.read) for run in self.runs]
        dtype = row_dtype(entries if self.rows is None else self.rows)
        rows = NpyStream(self.folder / ROWS, dtype, entries)
        values = NpyStream(self.folder / VALUES, np.dtype("<f4"), entries)
        for block_rows, block_values in merged_blocks(sources, indptr, MERGE_BLOCK):
            rows.write(block_rows)
            values.write(block_values)
        digests = {rows.path: rows.close(), values.path: values.close()}
        indptr_file = HashedFile(self.folder / INDPTR)
        np.lib.format.write_array(indptr_file, indptr, allow_pickle=False)
        digests[indptr_file.path] = indptr_file.close()
        for run in self.runs:
            run.rows.unlink()
            run.values.unlink()
        return {self.folder / name: digests[self.folder / name] for name in FILES}


RunReader = Callable[[int, int], tuple[np.ndarray, np.ndarray]]


def concept_blocks(indptr: np.ndarray, block: int) -> list[tuple[int, int]]:
    """Consecutive concept ranges [c0, c1) covering all concepts, each holding at most `block`
    entries, or a single concept when that one holds more."""
    indptr = np.asarray(indptr)
    concepts = len(indptr) - 1
    blocks, c0 = [], 0
    while c0 < concepts:
        c1 = int(np.searchsorted(indptr, indptr[c0] + block, side="right")) - 1
        c1 = min(max(c1, c0 + 1), concepts)
        blocks.append((c0, c1))
        c0 = c1
    return blocks


def merged_blocks(
    sources: Sequence[tuple[np.ndarray, RunReader]], indptr: np.ndarray, block: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The CSR rows and values of runs (counts, reader of entries [a, b)) given in row order,
    block of concepts by block: concatenated, the blocks are `csr_from_runs` of the runs."""
    starts = [np.concatenate([[0], np.cumsum(counts)]).astype(np.int64) for counts, _ in sources]
    for c0, c1 in concept_blocks(indptr, block):
        low = int(indptr[c0])
        rows = np.empty(int(indptr[c1]) - low, dtype=np.int64)
        values = np.empty(len(rows), dtype=np.float32)
        cursor = indptr[c0:c1] - low  # the next free slot of each concept in the block
        for (counts, read), start in zip(sources, starts, strict=True):
            a, b = int(start[c0]), int(start[c1])
            if a == b:
                continue
            part = PostingRun(counts[c0:c1], *read(a, b))
            at = scatter_positions(part, cursor)
            rows[at], values[at] = part.rows, part.values
            cursor += part.counts
        yield rows, values


class NpyStream:
    """A .npy file of a known length (rows of `row_shape`) written front to back (np.save's
    header and bytes), hashed on the way."""

    def __init__(
        self, path: Path, dtype: np.dtype, length: int, row_shape: tuple[int, ...] = ()
    ) -> None:
        self.path, self.dtype, self.length = path, dtype, length
        self.row_shape = row_shape
        self.written = 0
        self._file = HashedFile(path)
        shape = (length, *row_shape)
        header = {"descr": dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
        write_array_header_1_0(self._file, header)

    def write(self, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array, dtype=self.dtype)
        if array.shape[1:] != self.row_shape:
            raise ValueError(
                f"{self.path.name}: rows of shape {array.shape[1:]}, expected {self.row_shape}"
            )
        self._file.write(memoryview(array).cast("B"))
        self.written += len(array)

    def close(self) -> str:
        digest = self._file.close()
        if self.written != self.length:
            raise RuntimeError(f"{self.path.name}: wrote {self.written} of {self.length} entries")
        return digest


def filter_postings(base: Postings, new_row: np.ndarray, folder: Path) -> list[Path]:
    """Write the three CSR files of `base` without the rows whose `new_row` is −1, every other
    row r renamed new_row[r] (new_row must be increasing over the kept rows). Two chunked
    passes: count the kept entries per concept, then copy them in order."""
    new_row = np.asarray(new_row, dtype=np.int64)
    indptr = np.asarray(base.indptr)
    entries = int(indptr[-1])
    counts = np.zeros(base.concepts, dtype=np.int64)
    for start in range(0, entries, CHECK_CHUNK):
        stop = min(start + CHECK_CHUNK, entries)
        kept = new_row[np.asarray(base.rows[start:stop])] >= 0
        counts += np.bincount(
            entry_concepts(indptr, start, stop)[kept], minlength=base.concepts
        ).astype(np.int64)
    new_indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    kept_rows = int((new_row >= 0).sum())
    rows = open_memmap(folder / ROWS, "w+", row_dtype(kept_rows), (int(new_indptr[-1]),))
    values = open_memmap(folder / VALUES, "w+", np.float32, (int(new_indptr[-1]),))
    at = 0
    for start in range(0, entries, CHECK_CHUNK):
        renamed = new_row[np.asarray(base.rows[start : start + CHECK_CHUNK])]
        kept = renamed >= 0
        n = int(kept.sum())
        rows[at : at + n] = renamed[kept]
        values[at : at + n] = np.asarray(base.values[start : start + CHECK_CHUNK])[kept]
        at += n
    rows.flush()
    values.flush()
    del rows, values
    np.save(folder / INDPTR, new_indptr, allow_pickle=False)
    paths = [folder / name for name in FILES]
    for path in paths:
        fsync_file(path)
    return paths


class Postings:
    """A bundle's postings, read memory-mapped: `get(concept)` → (rows, activations)."""

    def __init__(self, folder: Path) -> None:
        self.indptr = np.load(folder / INDPTR, allow_pickle=False)
        self.rows = np.load(folder / ROWS, mmap_mode="r", allow_pickle=False)
        self.values = np.load(folder / VALUES, mmap_mode="r", allow_pickle=False)

    @property
    def concepts(self) -> int:
        return len(self.indptr) - 1

    def get(self, concept: int) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= concept < self.concepts:
            raise IndexError(f"concept {concept} outside [0, {self.concepts})")
        start, stop = int(self.indptr[concept]), int(self.indptr[concept + 1])
        rows = np.asarray(self.rows[start:stop], dtype=np.int64)
        return rows, np.asarray(self.values[start:stop])


def entries_of_rows(
    indptr: np.ndarray,
    rows: np.ndarray,
    values: np.ndarray,
    first_concept: int,
    wanted: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, concept, value) of every entry of concepts first_concept and up whose row is one
    of `wanted` (few rows): one pass over those concepts' entries, in concept order."""
    start = int(indptr[first_concept])
    tail = np.asarray(rows[start:])
    at = np.flatnonzero(np.isin(tail, np.asarray(wanted, dtype=np.int64)))
    concepts = np.searchsorted(indptr, start + at, side="right") - 1
    return tail[at].astype(np.int64), concepts.astype(np.int64), np.asarray(values[start:])[at]


def postings_faults(
    indptr: np.ndarray,
    rows: np.ndarray,
    values: np.ndarray,
    n_rows: int,
    k: int,
    axis_concepts: int | None = None,
) -> list[str]:
    """Every inconsistency of CSR postings over n_rows rows with k axis concepts per row (read
    in chunks, so memory stays bounded by the chunk and a count per row). The first
    `axis_concepts` concepts (None: all) are the CEDAR axes, k per row; the word concepts after
    them hold any number of rows each."""
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
    axes = len(indptr) - 1 if axis_concepts is None else axis_concepts
    if not 0 < axes < len(indptr):
        return [f"{INDPTR}: {len(indptr) - 1} concepts, fewer than the {axes} axes"]
    axis_entries = int(indptr[axes])
    if axis_entries != n_rows * k:
        faults.append(f"{ROWS}: {axis_entries} axis entries, expected rows·k = {n_rows}·{k}")
    starts = indptr[1:-1]
    per_row = np.zeros(n_rows, dtype=np.int64)
    for start in range(0, len(rows), CHECK_CHUNK):
        chunk = np.asarray(rows[start : start + CHECK_CHUNK + 1], dtype=np.int64)
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
    if not faults and (per_row != k).any():
        bad = int(np.flatnonzero(per_row != k)[0])
        faults.append(f"{ROWS}: row {bad} appears {per_row[bad]} times, expected k = {k}")
    return faults
