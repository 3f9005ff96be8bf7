"""The store's int8 codes kept block by block: one file per block of the rotation.

A rotated int8 store (indexer/format/store/) codes each block [start, end) of a row on its own
grid. Kept row by row (`store_vectors.npy`, [N, D]), the head of a prefix L is a strided view,
every row's first L bytes followed by D − L bytes a scan skips. Kept block by block,

    store_vectors.{start}-{end}.npy    int8 [N, end − start]    one file per block

each block's codes are one contiguous [N, w_b] array: a head of L is the first blocks whole,
which torch's weight-only int8 kernel reads as they lie, one block at a time with s_b(x) as
its rows' scales (indexer/format/store/kernel_scan.py). The bytes are the same; a row's codes
are B short runs instead of one, so a rerank gathers from B arrays (at 100,000 × 512 the
engine's p50 where no direct scan is involved stayed within 6 %,
`python -m benchmarks.service.layout.store_layout`). An index build keeps an int8 store by blocks
unless told `--store-layout rows`; both are read: the record of a store kept by rows names
`vectors`, of one kept by blocks `blocks`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

LAYOUTS = ("rows", "blocks")
LANES = 16  # the weight-only int8 kernel reads a row 16 codes at a time (kernel_scan.py)


def block_file(start: int, end: int) -> str:
    """The file of the codes of block [start, end)."""
    return f"store_vectors.{start}-{end}.npy"


def block_files(ends: Sequence[int]) -> list[str]:
    """The files of a store kept by blocks that end at `ends`, in block order."""
    starts = (0, *ends[:-1])
    return [block_file(start, end) for start, end in zip(starts, ends, strict=True)]


def codes_label(layout: str) -> str:
    """How an update's actions name a store's codes: its one file, or its block files."""
    return "store_vectors.npy" if layout == "rows" else "store_vectors.*.npy"


def code_files(record: Mapping[str, Any]) -> list[str]:
    """The files of a store record's codes: its blocks', or the one file of a row layout."""
    return list(record["blocks"]) if "blocks" in record else [str(record["vectors"])]


class BlockCodes:
    """Codes [N, D] held as one array per block ([N, w_b] each), read as the row-major array
    they stand for: `codes[rows]` and `codes[rows, a:b]` (rows an index, a slice or an index
    array) give the same values as on [N, D], gathered from the blocks they cover (a view where
    one block covers them)."""

    def __init__(self, parts: Sequence[np.ndarray]) -> None:
        if not parts or any(p.ndim != 2 or len(p) != len(parts[0]) for p in parts):
            raise ValueError("block codes: [N, w] arrays of the same N, one a block")
        if len({p.dtype for p in parts}) != 1:
            raise ValueError("block codes: the blocks' dtypes differ")
        self.parts = list(parts)
        widths = np.array([p.shape[1] for p in parts])
        self.ends = tuple(int(end) for end in np.cumsum(widths))
        self.starts = (0, *self.ends[:-1])

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.parts[0]), self.ends[-1])

    @property
    def dtype(self) -> np.dtype:
        return self.parts[0].dtype

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return 2

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self[:, :]
        return whole if dtype is None else whole.astype(dtype)

    def covering(self, length: int) -> list[tuple[int, int, np.ndarray]]:
        """(start, end, codes [N, w_b]) of the blocks a head of `length` covers whole."""
        return [
            (start, end, part)
            for start, end, part in zip(self.starts, self.ends, self.parts, strict=True)
            if end <= length
        ]

    def __getitem__(self, key: Any) -> np.ndarray:
        rows, columns = key if isinstance(key, tuple) else (key, slice(None))
        if not isinstance(columns, slice) or columns.step not in (None, 1):
            raise IndexError("block codes take a slice of columns with no step")
        low, high, _ = columns.indices(self.shape[1])
        covered = [
            (start, end, part)
            for start, end, part in zip(self.starts, self.ends, self.parts, strict=True)
            if start < high and end > low
        ]
        if len(covered) <= 1:  # one block's columns: a view where the rows are a slice
            start, _, part = covered[0] if covered else (0, 0, self.parts[0])
            return part[rows, max(low - start, 0) : max(high - start, 0)]
        gather = isinstance(rows, np.ndarray) and rows.dtype.kind in "iu"
        shape = self.parts[0][rows, :0].shape[:-1]
        out = np.empty((*shape, high - low), dtype=self.dtype)
        for start, end, part in covered:
            lo, hi = max(low, start), min(high, end)
            whole = gather and lo == start and hi == end  # take: a third of a fancy index's cost
            out[..., lo - low : hi - low] = (
                part.take(rows, axis=0) if whole else part[rows, lo - start : hi - start]
            )
        return out
