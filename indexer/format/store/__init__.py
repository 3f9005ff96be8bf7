"""The shared vector store: every row's rotated full vector kept once, for every granularity.

A bundle written with a store (`strata index build --store float16`, the manifest's `store`
record) keeps, instead of one float32 copy of every row per prefix,

    store_vectors.npy   float16 [N, D] (or int8)   c(x) = code of p_D(x), the unit rotated row
    store_norms.npy     float32 [N, P]             ‖c(x)[:L]‖ for each prefix L of the contract

and p_L(x) is read as the head of the row, renormalised: p̂_L(x) = c(x)[:L] / ‖c(x)[:L]‖
(p_L(p_D(x)) = p_L(x): the head of a unit row is z[:L] times a positive number, which the
renormalisation divides out). So a Flat prefix, an exact rerank at any L (the funnel) and a
filtered exact scan all read the one store; prefixes that need a structure of their own (an
ANN shortlist: HNSW, IVF) keep their index file beside it.

Codes: `float16` rounds each coordinate (relative error ≤ 2⁻¹¹). `int8` is rotational scalar
quantization by blocks. The contract's prefixes cut a row into blocks [0, L₁), [L₁, L₂), …,
[L_P, D); each block is turned by its own random orthogonal matrix (one block-diagonal R,
kept in

    store_rotation.npy  float32 [D, D]         R, block-diagonal, orthogonal
    store_scales.npy    float32 [N, B]         s_b(x), block b's step: its largest |y| / 127

so y = p_D(x) R spreads each block's energy evenly over its coordinates), and each block of y is
rounded on its own 8-bit grid, c_b = round(y_b / s_b). A head ends on a block's end, so its
inner products are those of the rotated heads, (q R_L) · (c s)_L, with no decoding back; and
the blocks of small variance (the late coordinates of a GraSP-VL rotation) get a grid of their
own instead of the largest coordinate's. Against one scale per row (an int8 store written
before, still read: its record names no rotation) this halves the quantization's misses at
recall@10 (benchmarks/indexer/store_codes.py); the coding's arithmetic is in
indexer/format/store/block_codes.py. The stored norms are those of the decoded heads, so p̂_L
is unit. An int8 store is kept block by block by default, one file [N, w_b] a block
(`store_vectors.{start}-{end}.npy`, the record's `blocks`; indexer/format/store/block_layout.py),
so that a direct scan reads each block of a head contiguous with torch's weight-only int8
kernel (indexer/format/store/kernel_scan.py); one kept by rows (`--store-layout rows`, and every
store written before) keeps `store_vectors.npy`, scanned with `torch._int_mm` (integer_scan.py).

`StoreIndex` (indexer/format/store/faiss_view.py) is a prefix's view of the store with the part
of FAISS's index interface the bundle's readers use (ntotal, d, search, reconstruct,
reconstruct_n, reconstruct_batch), so tuning, verification, explanation and filtering treat it
as the exact storage it is. Pure functions for the arithmetic; `StoreWriter`
(indexer/format/store/writer.py) streams the files (hashed on the way, as the postings are,
each created new: never over an existing file);
`VectorStore` maps them read-only, a bundle's after checking them against the manifest
(indexer/format/mapped.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from indexer.format.mapped import Recorded, advise_random, check_mapped_files, release_rows
from indexer.format.store.block_codes import (
    block_dots,
    block_ends,
    decode_heads,
    gathered_dots,
    rotation_blocks,
)
from indexer.format.store.block_layout import BlockCodes, code_files
from indexer.format.store.integer_scan import (
    BLOCK_BYTES,
    COLUMNS,
    approximate_scores,
    best_values,
    integer_product,
    integer_products,
    kept_candidates,
    kth_value,
    rounded_queries,
)
from indexer.format.store.kernel_scan import (
    KERNEL_BLOCK_BYTES,
    kernel_ready,
    kernel_scores,
    turned_blocks,
    weight_kernel,
)
from indexer.format.store.top_k import merge_top_k, pad
from training.core.errors import InputError
from training.core.metrics import prefix_vectors

VECTORS, NORMS = "store_vectors.npy", "store_norms.npy"
SCALES, ROTATION = "store_scales.npy", "store_rotation.npy"
FILES = (VECTORS, NORMS)
DTYPES = {"float16": np.dtype("<f2"), "int8": np.dtype("i1")}
# |p̂_L − p_L| a stored head may differ from the exact one by, per coordinate (verify)
TOLERANCE = {"float16": 2e-3, "int8": 6e-2}
SCAN_FLOATS = 2**21  # floats decoded per block of a scan (8 MB: a block stays in cache)
INTEGER_WIDTH = 4  # a scan reads in integers where L ≥ this × its queries (integer_scannable)


class StoreError(InputError):
    """A store dtype, file or request the store cannot serve."""


def check_dtype(dtype: str) -> np.dtype:
    if dtype not in DTYPES:
        raise StoreError(f"unknown store dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


# --- the arithmetic (pure) --------------------------------------------------------------------


def encode_rows(unit_rows: np.ndarray, dtype: str) -> np.ndarray:
    """The codes of unit rows p_D [n, D] with no rotation: float16, or int8 scaled per row to
    ±127 (the int8 of a store written before the rotation)."""
    rows = np.asarray(unit_rows, dtype=np.float32)
    if check_dtype(dtype) == DTYPES["float16"]:
        return rows.astype("<f2")
    peak = np.abs(rows).max(axis=1, keepdims=True)
    scale = np.divide(127.0, peak, out=np.zeros_like(peak), where=peak > 0)
    return np.clip(np.rint(rows * scale), -127, 127).astype("i1")


def head_norms(codes: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
    """‖codes[:, :L]‖ for each L, float32 [n, len(lengths)] (from one cumulative sum)."""
    squares = np.cumsum(np.square(np.asarray(codes, dtype=np.float32)), axis=1)
    return np.sqrt(squares[:, [length - 1 for length in lengths]]).astype(np.float32)


def heads(codes: np.ndarray, length: int, norms: np.ndarray | None = None) -> np.ndarray:
    """p̂_L of code rows [n, ≥ L]: the head, divided by its norm (given, or computed); a zero
    head stays zero."""
    head = np.asarray(codes[:, :length], dtype=np.float32)
    if norms is None:
        return prefix_vectors(head, length)
    norms = np.asarray(norms, dtype=np.float32).reshape(-1, 1)
    return np.divide(head, norms, out=np.zeros_like(head), where=norms > 0)


# --- reading ----------------------------------------------------------------------------------


class VectorStore:
    """A bundle's store, memory-mapped read-only; `lengths` the prefixes its norms cover.

    `files`: the manifest's records of the version's files. Given them, each of the two files
    is checked against its record (size, then sha256) before it is mapped, and a damaged one
    is a StoreError naming it (indexer/format/mapped.py); without them (a verifier or writer
    that has just checked or written the files) they are mapped as they are."""

    def __init__(
        self,
        folder: Path,
        record: dict[str, Any],
        files: Mapping[str, Recorded] | None = None,
    ) -> None:
        self.dtype = str(record["dtype"])
        check_dtype(self.dtype)
        self.lengths = [int(n) for n in record["lengths"]]
        self.on_disk = bool(record.get("on_disk", False))
        self.layout = "blocks" if "blocks" in record else "rows"
        mapped = [*code_files(record), record["norms"]] + [
            record[key] for key in ("scales", "rotation") if key in record
        ]
        if files is not None:
            check_mapped_files(folder, files, mapped, StoreError)
        try:
            parts = [
                np.load(folder / name, mmap_mode="r", allow_pickle=False)
                for name in code_files(record)
            ]
            self.norms = np.load(folder / record["norms"], mmap_mode="r", allow_pickle=False)
            self.scales = self.rotation = None
            if "rotation" in record:
                self.scales = np.load(folder / record["scales"], mmap_mode="r", allow_pickle=False)
                self.rotation = np.load(folder / record["rotation"], allow_pickle=False)
            self._mapped = [*parts, self.norms] + ([self.scales] if self.scales is not None else [])
            # plain views of the same pages: a rerank's gathers skip np.memmap's per-index
            # wrapping (three gathers a query); the memmaps stay in `_mapped` for madvise
            views = [np.asarray(part) for part in parts]
            self.codes = BlockCodes(views) if self.layout == "blocks" else views[0]
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read the vector store in {folder}: {exc}") from None
        self.ends = block_ends(self.lengths, self.dim)
        if self.layout == "blocks" and self.codes.ends != self.ends:
            raise StoreError(
                f"the vector store in {folder} is kept in blocks ending at {self.codes.ends}, "
                f"its prefixes end them at {self.ends}"
            )
        if self.on_disk:  # reranks read scattered rows: no read-ahead of their neighbours
            for array in self._mapped:
                advise_random(array)
        self.norms = np.asarray(self.norms)
        self.scales = None if self.scales is None else np.asarray(self.scales)
        blocks = [] if self.rotation is None else rotation_blocks(self.rotation, self.ends)
        self._blocks = blocks  # R's diagonal blocks, a rerank's query turned block by block

    @property
    def rows(self) -> int:
        return int(self.codes.shape[0])

    @property
    def dim(self) -> int:
        return int(self.codes.shape[1])

    def _decoded(self, at: np.ndarray | slice, length: int) -> np.ndarray:
        """The rows `at` (indices or a slice), their first `length` coordinates decoded
        (rotated space), float32."""
        scales = None if self.scales is None else self.scales[at]
        return decode_heads(self.codes[at, :length], scales, self.ends, length)

    def _turned(self, queries: np.ndarray, length: int) -> np.ndarray | None:
        """Queries [.., L] in the rotated space (qR_L) where a head of `length` can be scored
        there (no rotation, or L ends a block); None where it cannot."""
        if self.rotation is None:
            return np.asarray(queries, dtype=np.float32)
        if length not in self.ends:
            return None
        return np.asarray(queries, dtype=np.float32) @ self.rotation[:length, :length]

    def _rows_at(self, at: np.ndarray | slice, length: int) -> np.ndarray:
        """p̂_L of the rows `at`, float32 [n, L], in the rows' own space."""
        if self.rotation is None:
            head = self._decoded(at, length)
            norms = self.norms[at, self.lengths.index(length)] if length in self.lengths else None
            return heads(head, length, norms)
        whole = next(end for end in self.ends if end >= length)  # decode whole blocks
        turned = self._decoded(at, whole) @ self.rotation[:whole, :whole].T
        if length == whole and length in self.lengths:
            return heads(turned, length, self.norms[at, self.lengths.index(length)])
        return heads(turned, length)

    def prefix_rows(self, rows: np.ndarray, length: int) -> np.ndarray:
        """p̂_L of the given rows, float32 [n, L] (stored norms where L is a contract prefix)."""
        return self._rows_at(np.asarray(rows, dtype=np.int64), length)

    def prefix_scores(self, rows: np.ndarray, length: int, query: np.ndarray) -> np.ndarray:
        """s_L of the given rows against one unit query [L], float32 [n]: each head's inner
        product first (in the rotated space, `block_dots`), then one division by its norm
        (stored where L is a contract prefix), so only the first L columns are widened and no
        [n, L] quotient is written; 0 for a zero head. Equal to `prefix_rows(rows, length) @
        query` up to float rounding."""
        return self.rows_scores(rows, length, np.asarray(query, np.float32)[None])[0]

    def rows_scores(self, rows: np.ndarray, length: int, queries: np.ndarray) -> np.ndarray:
        """s_L of the given rows against queries [Q, L], float32 [Q, n]: `prefix_scores` for
        several queries, the rows gathered once."""
        return self._scores(
            np.asarray(rows, dtype=np.int64), length, np.asarray(queries, np.float32)
        )

    def block(self, start: int, stop: int, length: int) -> np.ndarray:
        """p̂_L of rows [start, stop), float32 (a store on disk then lets their pages go)."""
        decoded = self._rows_at(slice(start, stop), length)
        if self.on_disk:
            self.release(start, stop)
        return decoded

    def release(self, start: int = 0, stop: int | None = None) -> None:
        """Drop rows [start, stop) (default: all) from this process's resident set
        (MADV_DONTNEED on their pages: the page cache may keep them, a later read faults them
        back in), so that a pass over a store on disk — tuning's exact truth and its ladders, a
        funnel's calibration, a filtered scan — leaves none of it resident."""
        stop = self.rows if stop is None else stop
        for array in self._mapped:
            release_rows(array, start, stop)

    def block_scores(self, start: int, stop: int, length: int, queries: np.ndarray) -> np.ndarray:
        """s_L of rows [start, stop) against unit queries [Q, L], float32 [Q, stop − start]:
        the heads' inner products first, then one division by their norms (no [n, L] quotient
        written, as `prefix_scores`); 0 for a zero head."""
        return self._scores(slice(start, stop), length, queries)

    def _scores(self, at: np.ndarray | slice, length: int, queries: np.ndarray) -> np.ndarray:
        """s_L of the rows `at` against unit queries [Q, L], float32 [Q, n]."""
        scales = None if self.scales is None else self.scales[at]
        if (
            isinstance(at, np.ndarray)
            and self.layout == "blocks"
            and scales is not None
            and length in self.lengths
        ):  # a rerank's rows in a store kept by blocks: scored block by block
            dots = gathered_dots(self.codes.parts, at, scales, queries, self._blocks)
            norms = np.asarray(self.norms[at, self.lengths.index(length)], dtype=np.float32)
            return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
        turned = self._turned(queries, length)
        if turned is None:  # L inside a block: the rows decoded back to their own space
            return np.asarray(queries, np.float32) @ self._rows_at(at, length).T
        codes = self.codes[at, :length]
        if length in self.lengths:
            head = np.asarray(codes, dtype=np.float32)
            dots = block_dots(head, scales, turned, self.ends)
            norms = np.asarray(self.norms[at, self.lengths.index(length)], dtype=np.float32)
        else:
            head = decode_heads(codes, scales, self.ends, length)
            dots = turned @ head.T
            norms = np.sqrt(np.einsum("ij,ij->i", head, head))
        return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)

    def scan(
        self, queries: np.ndarray, length: int, k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k by s_L over every row (or the rows where the boolean mask `allowed` is
        True) for unit queries [Q, L]: (scores [Q, k], rows [Q, k]) padded as FAISS pads. A
        rotated int8 store is read in integer arithmetic, its candidates then scored in floats
        (`integer_scan`); the answer is the same."""
        q = np.asarray(queries, dtype=np.float32)
        if self.integer_scannable(length, k, len(q)):
            return self.integer_scan(q, length, k, allowed)
        best = (np.zeros((len(q), 0), np.float32), np.zeros((len(q), 0), np.int64))
        block = max(1024, SCAN_FLOATS // length)
        for scores, rows in self._scored_blocks(
            block, lambda start, stop: self.block_scores(start, stop, length, q), allowed
        ):
            best = merge_top_k(best, scores, rows, k)
        return pad(*best, k)

    def _scored_blocks(
        self,
        block: int,
        score: Callable[[int, int], np.ndarray],
        allowed: np.ndarray | None,
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(scores [Q, n], rows [n]) of every block of `block` rows in order, `score(start,
        stop)` giving the block's [Q, stop − start]: only the rows the mask `allowed` keeps
        (all without one), the block's pages let go after it on a store on disk."""
        for start in range(0, self.rows, block):
            stop = min(start + block, self.rows)
            scores = score(start, stop)
            if self.on_disk:
                self.release(start, stop)
            rows = np.arange(start, stop, dtype=np.int64)
            if allowed is not None:
                mask = np.asarray(allowed[start:stop], dtype=bool)
                scores, rows = scores[:, mask], rows[mask]
            yield scores, rows

    def integer_scannable(self, length: int, k: int, queries: int = 1) -> bool:
        """Whether a scan of prefix `length` for `queries` queries reads the codes in integer
        arithmetic: a rotated int8 store, a contract prefix (a block's end), and a torch that
        has the product. Kept by blocks, the weight-only int8 kernel, for any batch (at
        100,000 × 512, one thread: 1.5–2.3× the float scan's speed for one query, 1.45–2.2×
        for 16 to 256; `python -m benchmarks.indexer.direct_scan`). Kept by rows,
        `torch._int_mm` (columns in multiples of 8) where the head is at least INTEGER_WIDTH
        times as long as the batch is large: that product saves work in proportion to L a
        row, and its own scoring costs work in proportion to Q (1.3–1.4× faster at L = 32 for
        one query, 0.8× for 16; 2.1–4.2× at L = 64 … 512 for one, 1.0–1.7× for 64)."""
        if not (
            self.dtype == "int8" and self.rotation is not None and length in self.lengths and k > 0
        ):
            return False
        if isinstance(self.codes, BlockCodes):
            return weight_kernel() is not None
        return (
            queries * INTEGER_WIDTH <= length
            and length % COLUMNS == 0
            and integer_product() is not None
        )

    def integer_scan(
        self, queries: np.ndarray, length: int, k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """`scan` in integer arithmetic: every row's approximate score a(x) from its int8
        codes, block by block (kept by blocks: indexer/format/store/kernel_scan.py; row by
        row: integer_scan.py), within a bound ε of s(x) that depends on the query alone; the
        rows within 2ε of the running k-th best a kept; those scored as the float scan scores
        them, and the top k of them."""
        q = np.asarray(queries, dtype=np.float32)
        turned = self._turned(q, length)
        at = self.lengths.index(length)
        if isinstance(self.codes, BlockCodes):
            covering = self.codes.covering(length)
            blocks = turned_blocks(
                turned, self.ends, [kernel_ready(codes) for _, _, codes in covering]
            )
            bound = blocks.bound
            block = max(1024, KERNEL_BLOCK_BYTES // length)

            def approximate(start: int, stop: int) -> np.ndarray:
                codes = [part[start:stop] for _, _, part in covering]
                return kernel_scores(
                    blocks, codes, self.scales[start:stop], self.norms[start:stop, at]
                )
        else:
            rounded = rounded_queries(turned, self.ends)
            bound = rounded.bound
            block = max(1024, BLOCK_BYTES // max(length, 4 * rounded.laid.shape[1]))

            def approximate(start: int, stop: int) -> np.ndarray:
                products = integer_products(self.codes, start, stop, length, rounded.laid)
                scales, norms = self.scales[start:stop], self.norms[start:stop, at]
                return approximate_scores(products, scales, norms, rounded)

        running = np.zeros((len(q), 0), np.float32)  # the k largest a so far
        kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for approx, rows in self._scored_blocks(block, approximate, allowed):
            running = best_values(running, approx, k)
            kept.append(kept_candidates(approx, rows, kth_value(running, k), bound))
        which, rows, approx = (np.concatenate(part) for part in zip(*kept, strict=True))
        keep = approx >= kth_value(running, k)[which] - 2.0 * bound[which]
        which, rows = which[keep], rows[keep]
        scores = np.full((len(q), k), -np.inf, dtype=np.float32)
        found = np.full((len(q), k), -1, dtype=np.int64)
        for i in range(len(q)):
            mine = np.sort(rows[which == i])
            exact = self._scores(mine, length, q[i : i + 1])[0]
            order = np.lexsort((mine, -exact))[:k]
            scores[i, : len(order)], found[i, : len(order)] = exact[order], mine[order]
        return scores, found
