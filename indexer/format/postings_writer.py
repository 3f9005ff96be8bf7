"""Writing concept postings (the format: indexer/format/postings.py) without holding them in RAM.

`PostingsWriter` keeps only the per-concept counts in RAM, spills each shard's run to work
files, and at the end merges the runs block of concepts by block and writes the files front to
back in the compact format, hashing them on the way (shards arrive in row order, so rows stay
sorted within each concept): each block's rows give its concepts' rows of the chunk table
(`chunk_table`) and their low 16 bits, its activations are rounded to float16.
`csr_from_runs` is the same merge in RAM.

Incremental updates (indexer/update/rows.py): an existing CSR is itself a valid run of rows
[0, N), so `strata index add` opens `PostingsWriter(..., base=old postings)` — the old entries
come first in each block, then the new shards' runs — which gives exactly
`csr_from_runs([old, *new])`. `strata index delete` calls `filter_postings`: entries of removed
rows are dropped and the others renumbered, in one streaming pass (renumbering keeps the order
of rows, so every concept's rows stay strictly increasing). Both read the base through
`Postings`, so a base in the older format (absolute ids, float32 values) is written compact.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap

from indexer.format.npy_stream import NpyStream
from indexer.format.postings import (
    CHECK_CHUNK,
    CHUNK_BITS,
    CHUNKS,
    FILES,
    INDPTR,
    LOW_DTYPE,
    ROWS,
    VALUE_DTYPE,
    VALUES,
    PostingRun,
    Postings,
    RunReader,
    chunk_count,
    chunk_counts,
    chunk_table,
    entry_concepts,
    row_lows,
    scatter_positions,
    stored_values,
)
from training.core.files import HashedFile, create_new, fsync_file

MERGE_BLOCK = 4 * 2**20  # entries per block of PostingsWriter.close (48 MB of rows and values)


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
    """Accumulates shard runs on disk (`work/`), then writes the four CSR files front to back.

    `close` walks the concepts in blocks of about MERGE_BLOCK entries: each run's entries of
    the block's concepts are scattered into the block (runs in row order, so rows stay
    ascending within a concept), and the block's low row bits, chunk table rows and float16
    activations are appended to postings_rows.npy, postings_chunks.npy and
    postings_values.npy with their sha256 computed on the way. In RAM: the per-run counts and
    one block (a concept with more entries than MERGE_BLOCK is one block of its own).

    With `base` (a bundle's postings), the output starts from those entries — rows [0, N) of
    the base — and the runs added must hold the rows after them (an incremental add).
    `rows`: the version's row count, which sets the chunk table's width H = ⌈rows / 65,536⌉
    (`chunk_count`; None: bounded by the entries, as every row has at least one)."""

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
        """Write and fsync the four files, remove the work files; path → sha256."""
        indptr = np.concatenate([[0], np.cumsum(self.totals)]).astype(np.int64)
        entries = int(indptr[-1])
        sources: list[tuple[np.ndarray, RunReader]] = []
        if self.base is not None:
            base = self.base
            sources.append((self.base_counts, lambda a, b: (base.rows[a:b], base.values[a:b])))
        sources += [(run.counts, run.read) for run in self.runs]
        chunks = chunk_count(entries if self.rows is None else self.rows)
        rows = NpyStream(self.folder / ROWS, LOW_DTYPE, entries)
        values = NpyStream(self.folder / VALUES, VALUE_DTYPE, entries)
        table = NpyStream(self.folder / CHUNKS, np.dtype("<i8"), self.n_concepts, (chunks + 1,))
        for (c0, c1), block_rows, block_values in merged_blocks(sources, indptr, MERGE_BLOCK):
            counts = chunk_counts(indptr[c0 : c1 + 1], block_rows, chunks)
            table.write(chunk_table(counts, int(indptr[c0])))
            rows.write(row_lows(block_rows))
            values.write(stored_values(block_values))
        digests = {stream.path: stream.close() for stream in (rows, values, table)}
        indptr_file = HashedFile(self.folder / INDPTR)
        np.lib.format.write_array(indptr_file, indptr, allow_pickle=False)
        digests[indptr_file.path] = indptr_file.close()
        for run in self.runs:
            run.rows.unlink()
            run.values.unlink()
        return {self.folder / name: digests[self.folder / name] for name in FILES}


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
) -> Iterator[tuple[tuple[int, int], np.ndarray, np.ndarray]]:
    """((c0, c1), rows, values): the CSR rows (int64) and values (float32) of concepts
    [c0, c1) of runs (counts, reader of entries [a, b)) given in row order, block of concepts
    by block: concatenated, the blocks are `csr_from_runs` of the runs."""
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
        yield (c0, c1), rows, values


def filter_postings(
    base: Postings, new_row: np.ndarray, folder: Path, entries_kept: np.ndarray | None = None
) -> list[Path]:
    """Write the four CSR files of `base` without the rows whose `new_row` is −1, every other
    row r renamed new_row[r] (new_row must be increasing over the kept rows), and without the
    entries `entries_kept` (bool [E], if given) marks False. Two chunked passes: count the kept
    entries per concept and chunk of their new rows (the chunk table), then copy them in
    order."""
    new_row = np.asarray(new_row, dtype=np.int64)
    indptr = np.asarray(base.indptr)
    entries = int(indptr[-1])
    chunks = chunk_count(int((new_row >= 0).sum()))
    per_chunk = np.zeros(base.concepts * chunks, dtype=np.int64)
    for start in range(0, entries, CHECK_CHUNK):
        stop = min(start + CHECK_CHUNK, entries)
        renamed = new_row[base.rows[start:stop]]
        kept = renamed >= 0
        if entries_kept is not None:
            kept &= entries_kept[start:stop]
        slot = entry_concepts(indptr, start, stop)[kept] * chunks + (renamed[kept] >> CHUNK_BITS)
        per_chunk += np.bincount(slot, minlength=len(per_chunk))
    counts = per_chunk.reshape(base.concepts, chunks)
    new_indptr = np.concatenate([[0], np.cumsum(counts.sum(axis=1))]).astype(np.int64)
    table = chunk_table(counts)
    kept_entries = int(new_indptr[-1])
    paths = [create_new(folder / name) for name in FILES]  # new files, then opened by name
    rows = open_memmap(folder / ROWS, "w+", LOW_DTYPE, (kept_entries,))
    values = open_memmap(folder / VALUES, "w+", VALUE_DTYPE, (kept_entries,))
    at = 0
    for start in range(0, entries, CHECK_CHUNK):
        stop = min(start + CHECK_CHUNK, entries)
        renamed = new_row[base.rows[start:stop]]
        kept = renamed >= 0
        if entries_kept is not None:
            kept &= entries_kept[start:stop]
        n = int(kept.sum())
        rows[at : at + n] = row_lows(renamed[kept])
        values[at : at + n] = stored_values(base.values[start:stop][kept])
        at += n
    rows.flush()
    values.flush()
    del rows, values
    np.save(folder / INDPTR, new_indptr, allow_pickle=False)
    np.save(folder / CHUNKS, table, allow_pickle=False)
    for path in paths:
        fsync_file(path)
    return paths
