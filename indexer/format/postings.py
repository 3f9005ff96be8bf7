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
`csr_from_runs` merges runs in RAM, indexer/format/postings_writer.py streams the merge to disk
(and filters a version's postings for a delete).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib.format import dtype_to_descr, write_array_header_1_0

from training.core.files import HashedFile

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


class NpyStream:
    """A new .npy file of a known length (rows of `row_shape`) written front to back (np.save's
    header and bytes), hashed on the way (a `HashedFile`: never over an existing file)."""

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
