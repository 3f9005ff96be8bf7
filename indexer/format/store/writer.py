"""Writing the shared vector store (indexer/format/store/): its row files streamed as the
build's shards arrive, the rotation of an int8 store, the manifest's `store` record, and a
delete's filtered copy. Every file is created new (NpyStream): never over an existing one, so
a store that a service maps is never truncated or rewritten in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from indexer.format.npy_stream import NpyStream
from indexer.format.store import (
    DTYPES,
    NORMS,
    ROTATION,
    SCALES,
    VECTORS,
    StoreError,
    VectorStore,
    check_dtype,
    encode_rows,
    head_norms,
)
from indexer.format.store.block_codes import block_ends, decode_heads, encode_rotated
from indexer.format.store.block_layout import LAYOUTS, block_files

COPY_ROWS = 65_536  # rows of a base store copied per write


@dataclass(frozen=True)
class StorePlan:
    """What `write_batches` needs of a writer's plan: it is fed p_D, the full unit rows."""

    length: int


class CodeStreams:
    """The store's codes written as they arrive: one file [N, D] (the row layout), or one file
    [N, w_b] a block (the block layout: each block's columns of the rows to its own file)."""

    def __init__(
        self, folder: Path, dtype: np.dtype, rows: int, ends: Sequence[int], layout: str
    ) -> None:
        if layout not in LAYOUTS:
            raise StoreError(f"unknown store layout {layout!r}: choose one of {', '.join(LAYOUTS)}")
        self.starts = (0, *ends[:-1]) if layout == "blocks" else (0,)
        self.ends = tuple(ends) if layout == "blocks" else (ends[-1],)
        names = block_files(ends) if layout == "blocks" else [VECTORS]
        self.streams = [
            NpyStream(folder / name, dtype, rows, (end - start,))
            for name, start, end in zip(names, self.starts, self.ends, strict=True)
        ]

    def write(self, codes: np.ndarray) -> None:
        for stream, start, end in zip(self.streams, self.starts, self.ends, strict=True):
            stream.write(codes[:, start:end])


class StoreWriter:
    """Streams the store's row files (codes, norms, and an int8 store's block scales): fed p_D
    rows of consecutive gallery rows (the rows of `base`, a previous version's store, first when
    given: an incremental add, coded and laid out as the base is). `rotation`: R for a rotated
    int8 store (block_rotation; written beside by `write_rotation`), None for one scale per
    row. `layout`: "blocks" keeps a rotated store's codes one file a block (block_layout.py)."""

    def __init__(
        self,
        folder: Path,
        rows: int,
        dim: int,
        lengths: Sequence[int],
        dtype: str,
        base: VectorStore | None = None,
        rotation: np.ndarray | None = None,
        layout: str = "rows",
    ) -> None:
        self.plan = StorePlan(dim)
        self.dtype, self.lengths = dtype, sorted(int(n) for n in lengths)
        self.ends = block_ends(self.lengths, dim)
        self.rotation = base.rotation if base is not None else rotation
        layout = base.layout if base is not None else layout
        if self.rotation is not None and check_dtype(dtype) != DTYPES["int8"]:
            raise StoreError(f"a rotation codes int8 rows, not {dtype}")
        if layout == "blocks" and self.rotation is None:
            raise StoreError("only a rotated int8 store is kept by blocks")
        self.vectors = CodeStreams(folder, check_dtype(dtype), rows, self.ends, layout)
        self.norms = NpyStream(folder / NORMS, np.dtype("<f4"), rows, (len(self.lengths),))
        self.scales = None
        if self.rotation is not None:
            self.scales = NpyStream(folder / SCALES, np.dtype("<f4"), rows, (len(self.ends),))
        if base is not None:
            if base.dtype != dtype or base.dim != dim or base.lengths != self.lengths:
                raise StoreError("the base store's dtype, dimension or prefixes differ")
            for start in range(0, base.rows, COPY_ROWS):
                chunk = slice(start, start + COPY_ROWS)
                scales = None if base.scales is None else np.asarray(base.scales[chunk])
                self.add_codes(np.asarray(base.codes[chunk]), scales)

    def add(self, unit_rows: np.ndarray) -> None:
        if self.rotation is None:
            self.add_codes(encode_rows(unit_rows, self.dtype))
        else:
            self.add_codes(*encode_rotated(unit_rows, self.rotation, self.ends))

    def add_codes(self, codes: np.ndarray, scales: np.ndarray | None = None) -> None:
        self.vectors.write(codes)
        self.norms.write(
            head_norms(decode_heads(codes, scales, self.ends, self.plan.length), self.lengths)
        )
        if self.scales is not None:
            self.scales.write(scales)

    def close(self) -> dict[Path, str | None]:
        streams = [*self.vectors.streams, self.norms]
        streams += [self.scales] if self.scales is not None else []
        return {stream.path: stream.close() for stream in streams}


def write_rotation(folder: Path, rotation: np.ndarray) -> dict[Path, str | None]:
    """R as the new file store_rotation.npy of a version (a table of D rows, not of gallery
    rows); its sha256."""
    stream = NpyStream(folder / ROTATION, np.dtype("<f4"), len(rotation), rotation.shape[1:])
    stream.write(rotation)
    return {stream.path: stream.close()}


def store_record(
    dtype: str,
    lengths: Sequence[int],
    on_disk: bool = False,
    rotated: bool = False,
    blocks: Sequence[int] | None = None,
) -> dict[str, Any]:
    """The manifest's `store` record; `on_disk`: a replica reads it through mmap for reranks and
    need not hold it in RAM (indexer/format/footprint.py; absent before: False); `rotated`: an
    int8 store coded by rotated blocks, naming its scales and rotation (absent before);
    `blocks`: the block ends of a store kept by blocks, naming its block files instead of
    store_vectors.npy (absent before)."""
    codes = {"blocks": block_files(blocks)} if blocks is not None else {"vectors": VECTORS}
    record: dict[str, Any] = codes | {
        "norms": NORMS,
        "dtype": dtype,
        "lengths": sorted(int(n) for n in lengths),
        "on_disk": bool(on_disk),
    }
    if rotated:
        record |= {"scales": SCALES, "rotation": ROTATION}
    return record


def write_filtered_store(
    base: VectorStore, keep: np.ndarray, folder: Path
) -> dict[Path, str | None]:
    """The store of a version keeping the rows where `keep` is True (a delete)."""
    keep = np.asarray(keep, dtype=bool)
    writer = StoreWriter(
        folder,
        int(keep.sum()),
        base.dim,
        base.lengths,
        base.dtype,
        rotation=base.rotation,
        layout=base.layout,
    )
    for start in range(0, base.rows, COPY_ROWS):
        chunk = slice(start, start + COPY_ROWS)
        scales = None if base.scales is None else np.asarray(base.scales[chunk])[keep[chunk]]
        writer.add_codes(np.asarray(base.codes[chunk])[keep[chunk]], scales)
    return writer.close()
