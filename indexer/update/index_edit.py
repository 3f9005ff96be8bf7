"""A version's prefix indexes edited for `strata index add | delete`, never rebuilt from a cache.

Rows are FAISS ids (row position = id), so an add appends ids N, N + 1, ... and a delete removes
rows and renumbers the rest (row r → r − the number of deleted rows before r), keeping ids
contiguous. What each kind of index gets (the command's summary prints it per file):

| index                    | add                               | delete                           |
|--------------------------|-----------------------------------|----------------------------------|
| Flat (streamed file)     | copied + extended: stored rows,   | copied: the kept stored rows,    |
|                          | then the new ones, streamed       | streamed                         |
| HNSW                     | extended: new rows inserted into  | rebuilt from its stored vectors  |
|                          | a copy of the graph               | (a graph cannot drop nodes)      |
| IVF, lists in the file   | extended: a copy, quantizer and   | lists filtered and renumbered;   |
|  (+ RFlat refine)        | codebooks of the base kept        | refine rows removed in place     |
| IVF, lists on disk       | extended: base lists + new rows'  | lists filtered and renumbered    |
|                          | merged into a new .ivfdata        | into a new .ivfdata              |
| other flat codes (PQ, SQ)| extended: a copy                  | rows removed in place            |
| anything else            | extended: a copy                  | refused (rebuild)                |

Nothing is re-encoded: a delete keeps every surviving code as it is. A streamed Flat file after
an add or a delete holds the rows a full build of the same rows stores, in FAISS's own layout:
the same bytes when that build cuts the same shards (an add: the base's shards, then the
cache's), else equal to float rounding (a BLAS matmul may round a row's rotation differently in
a shard of another size; ≤ 1e-6 here). The approximate indexes hold the same rows under the
same ids, but their structure is not a rebuild's: HNSW inserts in another order, an IVF keeps
the quantizer trained on the base's sample. Everything runs from the base version's files:
memory is what building that index kind takes (indexer/format/prefix_index.py), a chunk of rows for
streamed Flat files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
from faiss.contrib.inspect_tools import get_invlist

from indexer.format.index_plan import IndexTypeError, PrefixPlan, new_index
from indexer.format.manifest import PrefixEntry
from indexer.format.prefix_index import read_prefix_index
from indexer.format.prefix_writers import (
    FlatFileWriter,
    MemoryIndexWriter,
    OnDiskIvfWriter,
    PrefixIndexWriter,
    empty_copy,
    flat_file_rows,
    flat_layout,
    merge_into_ondisk,
    write_index_file,
)
from indexer.format.served.mapped import MappedIndex
from indexer.format.served_index import mapped
from training.core.files import fsync_file
from training.core.granularity import Granularity

COPY_ROWS = 65_536  # rows copied or reconstructed per chunk


@dataclass
class EditedIndex:
    """The files written for one prefix (path → sha256 when computed, else None), and what
    was done to get them, in words."""

    files: dict[Path, str | None]
    action: str


def plan_of(entry: PrefixEntry) -> PrefixPlan:
    """The plan a manifest's prefix entry was built from."""
    return PrefixPlan(
        entry.length,
        Granularity(entry.granularity),
        entry.kind,
        entry.factory,
        entry.ondisk,
        entry.reason,
    )


def streamed_flat(entry: PrefixEntry, base_dir: Path) -> np.ndarray | None:
    """The stored rows of a prefix whose index is a streamed Flat file, else None."""
    if entry.factory != "Flat" or entry.ondisk:
        return None
    return flat_file_rows(base_dir / entry.file, entry.length)


def _kind(index: MappedIndex) -> str:
    if index.graph is not None:
        return "hnsw"
    if index.ivf is not None:
        return "ivf"
    if index.flat_codes:
        return "codes"
    return "other"


# --- add ---------------------------------------------------------------------------------------


def open_extended(
    entry: PrefixEntry, base_dir: Path, folder: Path, rows: int, work: Path
) -> tuple[PrefixIndexWriter, str]:
    """A writer for the prefix's index in the new version that already holds the base's rows
    (ids 0 .. n − 1); the caller adds the new rows (ids n, ...) and closes it. `rows` is the
    new version's total. Returns the writer and what it does, in words."""
    plan, base_path, path = plan_of(entry), base_dir / entry.file, folder / entry.file
    if entry.ondisk:
        base = read_prefix_index(base_path, entry.factory, ondisk=True)
        trained = empty_copy(read_prefix_index(base_path, entry.factory, ondisk=True))
        writer = OnDiskIvfWriter(plan, path, trained, work, base=base)
        return writer, (
            "extended: the base's inverted lists and the new rows' merged into a new .ivfdata "
            "(quantizer and codebooks of the base kept)"
        )
    stored = streamed_flat(entry, base_dir)
    layout = flat_layout(entry.length)
    if stored is not None and layout is not None:
        flat = FlatFileWriter(plan, path, rows, layout)
        for start in range(0, len(stored), COPY_ROWS):
            flat.add(stored[start : start + COPY_ROWS])
        return flat, "copied + extended: the stored rows, then the new ones (as a full build)"
    index = faiss.read_index(str(base_path))
    action = {
        "hnsw": "extended: the new rows inserted into a copy of the HNSW graph",
        "ivf": "extended: the new rows added to a copy (quantizer and codebooks of the base kept)",
    }.get(_kind(mapped(index)), "extended: the new rows added to a copy")
    return MemoryIndexWriter(plan, path, index), action


# --- delete ------------------------------------------------------------------------------------


def filtered_lists(lists: faiss.InvertedLists, new_row: np.ndarray) -> faiss.ArrayInvertedLists:
    """In-RAM inverted lists holding the entries of `lists` whose row is kept (new_row ≥ 0),
    each id renamed new_row[id], codes untouched, order within a list kept."""
    out = faiss.ArrayInvertedLists(lists.nlist, lists.code_size)
    for number in range(lists.nlist):
        ids, codes = get_invlist(lists, number)
        if not len(ids):
            continue
        renamed = new_row[ids]
        kept = renamed >= 0
        if kept.any():
            kept_ids = np.ascontiguousarray(renamed[kept], dtype=np.int64)
            kept_codes = np.ascontiguousarray(codes[kept])
            out.add_entries(
                number, len(kept_ids), faiss.swig_ptr(kept_ids), faiss.swig_ptr(kept_codes)
            )
    return out


def _replace_lists(index: faiss.Index, lists: faiss.ArrayInvertedLists, rows: int) -> None:
    ivf = faiss.extract_index_ivf(index)
    ivf.replace_invlists(lists, True)
    lists.this.disown()
    ivf.ntotal = index.ntotal = rows


def _remove_rows(index: faiss.Index, removed: np.ndarray) -> None:
    """Drop rows of a flat-codes index in place (later rows move up: renumbered by position)."""
    index.remove_ids(faiss.IDSelectorBatch(np.ascontiguousarray(removed, dtype=np.int64)))


def write_filtered(
    entry: PrefixEntry, base_dir: Path, folder: Path, new_row: np.ndarray
) -> EditedIndex:
    """Write the prefix's index without the rows whose new_row is −1, the others renumbered
    (see the module docstring for what each index kind gets)."""
    plan, base_path, path = plan_of(entry), base_dir / entry.file, folder / entry.file
    keep = new_row >= 0
    rows = int(keep.sum())
    stored = streamed_flat(entry, base_dir)
    layout = flat_layout(entry.length)
    if stored is not None and layout is not None:
        flat = FlatFileWriter(plan, path, rows, layout)
        for start in range(0, len(stored), COPY_ROWS):
            chunk = slice(start, start + COPY_ROWS)
            flat.add(np.asarray(stored[chunk])[keep[chunk]])
        return EditedIndex(flat.close(), "copied: the kept stored rows (as a full build)")
    if entry.ondisk:
        base = read_prefix_index(base_path, entry.factory, ondisk=True)
        lists = filtered_lists(faiss.extract_index_ivf(base).invlists, new_row)
        index = empty_copy(read_prefix_index(base_path, entry.factory, ondisk=True))
        data = path.with_suffix(".ivfdata")
        merge_into_ondisk(index, [lists], data)
        digest = write_index_file(index, path)
        del index, base, lists
        fsync_file(data)
        return EditedIndex(
            {path: digest, data: None},
            "inverted lists filtered and renumbered into a new .ivfdata (nothing re-encoded)",
        )
    index = faiss.read_index(str(base_path))
    served = mapped(index)
    kind = _kind(served)
    if kind == "hnsw":
        storage = served.exact
        if storage is None:
            raise IndexTypeError(
                f"prefix {entry.length}: cannot read the vectors back from {entry.factory!r} "
                "to drop rows; rebuild the bundle with `strata index build`"
            )
        rebuilt = new_index(entry.factory, entry.length)
        for start in range(0, index.ntotal, COPY_ROWS):
            n = min(COPY_ROWS, index.ntotal - start)
            rebuilt.add(storage.reconstruct_n(start, n)[keep[start : start + n]])
        action = "rebuilt from its stored vectors (an HNSW graph cannot drop nodes)"
        index = rebuilt
    elif kind == "ivf":
        _replace_lists(
            index, filtered_lists(faiss.extract_index_ivf(index).invlists, new_row), rows
        )
        action = "inverted lists filtered and renumbered (nothing re-encoded)"
        if served.refine is not None:
            _remove_rows(faiss.downcast_index(served.refine.refine_index), np.flatnonzero(~keep))
            action += "; refine rows removed"
    elif kind == "codes":
        _remove_rows(index, np.flatnonzero(~keep))
        action = "rows removed in place (later rows move up)"
    else:
        raise IndexTypeError(
            f"prefix {entry.length}: cannot delete rows from a {entry.factory!r} index; "
            "rebuild the bundle with `strata index build`"
        )
    writer = MemoryIndexWriter(plan, path, index)
    return EditedIndex(writer.close(), action)
