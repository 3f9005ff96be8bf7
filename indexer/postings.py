"""Concept postings: for every signed CEDAR concept, the gallery rows where it is active.

Each gallery row x has k active concepts (ConceptCoder.encode: ids c ∈ [0, 2D), 2j = +axis j,
2j + 1 = −axis j, and activations a = |(U(x − b))_j| ≥ 0). The postings are the transpose of
that [N, k] table, stored as CSR:

    postings_indptr.npy   int64   [2D + 1]   indptr[0] = 0, non-decreasing, indptr[-1] = N·k
    postings_rows.npy     int64   [N·k]      rows of concept c: rows[indptr[c]:indptr[c + 1]],
                                             strictly increasing (a row lists a concept once)
    postings_values.npy   float32 [N·k]      the matching activations, ≥ 0

Built shard by shard: `shard_postings` (pure) turns a shard's codes into a run sorted by
concept; `PostingsWriter` keeps only the per-concept counts in RAM, spills each run to a work
file, and at the end scatters the runs into memory-mapped output arrays (shards arrive in row
order, so rows stay sorted within each concept). `csr_from_runs` is the same merge in RAM.

Incremental updates (indexer/update.py): an existing CSR is itself a valid run of rows
[0, N), so `strata index add` opens `PostingsWriter(..., base=old postings)` — the old entries
are scattered first, in chunks, then the new shards' runs — which gives exactly
`csr_from_runs([old, *new])`. `strata index delete` calls `filter_postings`: entries of removed
rows are dropped and the others renumbered, in one streaming pass (renumbering keeps the order
of rows, so every concept's rows stay strictly increasing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap

from indexer.durable import fsync_file

INDPTR, ROWS, VALUES = "postings_indptr.npy", "postings_rows.npy", "postings_values.npy"
FILES = (INDPTR, ROWS, VALUES)
CHECK_CHUNK = 4 * 2**20


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


class PostingsWriter:
    """Accumulates shard runs on disk (`work/`), then writes the three CSR files.

    With `base` (a bundle's postings), the output starts from those entries — rows [0, N) of
    the base — and the runs added must hold the rows after them (an incremental add)."""

    def __init__(
        self, folder: Path, work: Path, n_concepts: int, base: Postings | None = None
    ) -> None:
        self.folder, self.work, self.n_concepts = folder, work, n_concepts
        if base is not None and base.concepts != n_concepts:
            raise ValueError(f"base postings have {base.concepts} concepts, not {n_concepts}")
        self.base = base
        self.base_counts = (
            np.zeros(n_concepts, dtype=np.int64)
            if base is None
            else np.diff(base.indptr).astype(np.int64)
        )
        self.totals = self.base_counts.copy()
        self.runs: list[Path] = []

    def add(self, run: PostingRun) -> None:
        path = self.work / f"postings-run-{len(self.runs):05d}.npz"
        with path.open("wb") as handle:
            np.savez(handle, counts=run.counts, rows=run.rows, values=run.values)
        self.runs.append(path)
        self.totals += run.counts

    def close(self) -> list[Path]:
        indptr = np.concatenate([[0], np.cumsum(self.totals)]).astype(np.int64)
        entries = int(indptr[-1])
        rows = open_memmap(self.folder / ROWS, "w+", np.int64, (entries,))
        values = open_memmap(self.folder / VALUES, "w+", np.float32, (entries,))
        cursor = indptr[:-1].copy()
        if self.base is not None:
            scatter_csr(self.base, rows, values, cursor)
            cursor += self.base_counts
        for path in self.runs:
            with np.load(path) as data:
                run = PostingRun(data["counts"], data["rows"], data["values"])
            at = scatter_positions(run, cursor)
            rows[at], values[at] = run.rows, run.values
            cursor += run.counts
            path.unlink()
        rows.flush()
        values.flush()
        del rows, values
        np.save(self.folder / INDPTR, indptr, allow_pickle=False)
        paths = [self.folder / name for name in FILES]
        for path in paths:
            fsync_file(path)
        return paths


def scatter_csr(base: Postings, rows: np.ndarray, values: np.ndarray, cursor: np.ndarray) -> None:
    """Copy CSR postings into output arrays: entry i of concept c goes to
    cursor[c] + (i − base.indptr[c]). Chunked, so memory stays bounded by the chunk."""
    indptr = np.asarray(base.indptr)
    entries = int(indptr[-1])
    for start in range(0, entries, CHECK_CHUNK):
        stop = min(start + CHECK_CHUNK, entries)
        concept = entry_concepts(indptr, start, stop)
        at = np.arange(start, stop, dtype=np.int64) - indptr[concept] + cursor[concept]
        rows[at] = base.rows[start:stop]
        values[at] = base.values[start:stop]


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
    rows = open_memmap(folder / ROWS, "w+", np.int64, (int(new_indptr[-1]),))
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
        return np.asarray(self.rows[start:stop]), np.asarray(self.values[start:stop])


def postings_faults(
    indptr: np.ndarray, rows: np.ndarray, values: np.ndarray, n_rows: int, k: int
) -> list[str]:
    """Every inconsistency of CSR postings over n_rows rows with k concepts per row (read in
    chunks, so memory stays bounded by the chunk and a count per row)."""
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
    if len(rows) != n_rows * k:
        faults.append(f"{ROWS}: {len(rows)} entries, expected rows·k = {n_rows}·{k}")
    starts = indptr[1:-1]
    per_row = np.zeros(n_rows, dtype=np.int64)
    for start in range(0, len(rows), CHECK_CHUNK):
        chunk = np.asarray(rows[start : start + CHECK_CHUNK + 1])
        if chunk.min() < 0 or chunk.max() >= n_rows:
            faults.append(f"{ROWS}: row ids outside [0, {n_rows})")
            return faults
        body = chunk[:CHECK_CHUNK]
        per_row += np.bincount(body, minlength=n_rows)
        steps = np.arange(start + 1, start + len(chunk))
        unsorted = (np.diff(chunk) <= 0) & ~np.isin(steps, starts)
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
