"""A gallery's rows as the open vocabulary scores them (service/engine/open_vocabulary.py):
their centred unit vectors x̃_i = (x_i − b)/‖x_i − b‖, recovered from the bundle's stored
full-length rows, their first two moments, and a sketch of them for finding the rows of a
direction without scoring every row exactly.

Recovery. The stored p_i = G(x_i − m)/‖x_i − m‖ (G, m the GraSP rotation and mean) gives back
the unit row x_i = m + n_i Gᵀp_i, with n_i = −a_i + √(a_i² + 1 − ‖m‖²) and a_i = ⟨p_i, Gm⟩, so
for a unit direction t̃

    ⟨x_i − b, t̃⟩ = ⟨m − b, t̃⟩ + n_i ⟨p_i, Gt̃⟩
    ‖x_i − b‖²   = ‖m − b‖² + 2 n_i ⟨p_i, G(m − b)⟩ + n_i²

and s_i = ⟨x̃_i, t̃⟩ costs three inner products at full length (`recovered_norms`,
`direction_scores`).

Moments. s is linear in x̃, so its mean and spread over the gallery are μ_s = ⟨x̄, t̃⟩ and
σ_s² = t̃ᵀ C t̃ − μ_s², with x̄ and C = mean(x̃ x̃ᵀ) (`GalleryMoments`): D² operations per
direction once they are measured.

Hubness. The open vocabulary cuts s − h_i, h_i the row's hub value (the mean of its best
scores over the readout's words: training.cedar.gallery_cuts.hub_scores), the inner product of
[x̃_i, h_i] with [t̃, −1] (`with_hubs`, `corrected_direction`): the moments and the sketch hold
those augmented rows, so both read the corrected score as they read s.

Sketch. The rows past a high cut on s lie where x̃ points along t̃. A phrase's direction keeps
little of its weight in the shortest GraSP-VL prefix, so the shortlist codes rank its rows
poorly; a few principal directions miss the rare phrases, whose rows lie in the spectrum's
tail; and a coarse partition of x̃ puts rows just past the cut in lists far down a direction's
order. So [x̃, h] itself is sketched at full length: product quantization, one 4-bit code per
SKETCH_WIDTH coordinates (the rows padded with zeros to a multiple of SKETCH_WIDTH: about D/8
bytes a row), scanned by FAISS's fast-scan kernels (`sketch_index`), which rank every row by
its corrected score approximately in a few milliseconds per million rows; the approximate best
rows are then scored exactly (service/engine/open_vocabulary.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np

CHUNK = 1 << 16  # rows per product pass of a FAISS storage
SIZING_ROWS = 1 << 13  # sampled x̃ kept: the rows a cut expects, and the sketch's codebooks
SKETCH_WIDTH = 4  # coordinates per 4-bit code of the sketch


@dataclass(frozen=True)
class GalleryMoments:
    """The first two moments of the gallery's x̃ (module doc), and a kept sample of them: a
    direction's cut without a pass over the rows, and the rows it expects."""

    mean: np.ndarray  # x̄ [D], float64
    second: np.ndarray  # C = mean(x̃ x̃ᵀ) [D, D], float64
    sizing: np.ndarray  # x̃ of up to SIZING_ROWS sampled rows [n, D], float32
    rows: int  # the gallery's

    def cut(self, direction: np.ndarray, z: float) -> float:
        """μ_s + z·σ_s of one unit direction t̃ [D]."""
        t = np.asarray(direction, dtype=np.float64)
        mu = float(self.mean @ t)
        return mu + z * math.sqrt(max(float(t @ self.second @ t) - mu * mu, 0.0))

    def expected(self, direction: np.ndarray, cut: float) -> float:
        """The rows of the gallery the kept sample expects at or past the cut."""
        passing = np.count_nonzero(self.sizing @ np.asarray(direction, np.float32) >= cut)
        return self.rows * passing / max(1, len(self.sizing))


def gallery_moments(blocks: list[np.ndarray], rows: int) -> GalleryMoments:
    """The moments of x̃ from its blocks (sampled rows), SIZING_ROWS of them kept, spread over
    the blocks."""
    count = sum(len(b) for b in blocks)
    dim = blocks[0].shape[1]
    mean, second = np.zeros(dim), np.zeros((dim, dim))
    for block in blocks:
        mean += block.sum(axis=0, dtype=np.float64)
        second += (block.T @ block).astype(np.float64)
    every = np.concatenate(blocks)
    kept = every[np.unique(np.linspace(0, count - 1, min(count, SIZING_ROWS)).astype(np.int64))]
    return GalleryMoments(mean / count, second / count, kept, rows)


def sampled_rows(total: int, most: int, seed: int = 0) -> np.ndarray:
    """Every row up to `most` of them, else `most` of them drawn once (seeded), sorted."""
    if total <= most:
        return np.arange(total, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(total, most, replace=False)).astype(np.int64)


def centred_rows(
    stored: np.ndarray, rotation: np.ndarray, grasp_mean: np.ndarray, cedar_mean: np.ndarray
) -> np.ndarray:
    """x̃ of stored rows p [n, D] (module doc), float32 [n, D]."""
    p = np.asarray(stored, dtype=np.float32)
    m = np.asarray(grasp_mean, dtype=np.float64)
    g = np.asarray(rotation, dtype=np.float64)
    gap = m - np.asarray(cedar_mean, dtype=np.float64)
    n, distance = recovered_norms(
        p @ (g @ m).astype(np.float32), p @ (g @ gap).astype(np.float32), float(m @ m), gap @ gap
    )
    x = gap.astype(np.float32) + n[:, None].astype(np.float32) * (p @ g.astype(np.float32))
    return x / distance[:, None].astype(np.float32)


def recovered_norms(
    head: np.ndarray, centre: np.ndarray, grasp_mean_norm2: float, mean_gap2: float
) -> tuple[np.ndarray, np.ndarray]:
    """(n_i, ‖x_i − b‖) of rows from a_i = ⟨p_i, Gm⟩ (`head`) and ⟨p_i, G(m − b)⟩ (`centre`),
    with ‖m‖² and ‖m − b‖² (module doc)."""
    a = np.asarray(head, dtype=np.float64)
    n = -a + np.sqrt(np.maximum(a * a + 1.0 - grasp_mean_norm2, 0.0))
    distance2 = mean_gap2 + 2 * n * np.asarray(centre, dtype=np.float64) + n * n
    return n, np.sqrt(np.maximum(distance2, 1e-12))


def direction_scores(
    products: np.ndarray, offset: float | np.ndarray, n: np.ndarray, distance: np.ndarray
) -> np.ndarray:
    """s_i = ⟨x̃_i, t̃⟩ from ⟨p_i, Gt̃⟩ (`products`) and ⟨m − b, t̃⟩ (`offset`), float32."""
    return ((offset + n * np.asarray(products, dtype=np.float64)) / distance).astype(np.float32)


def product_blocks(storage: Any, queries: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, float32 [n, Q]) blocks of every stored row's inner products with unit
    queries [Q, d], in row order (the shared store's decoded heads, `VectorStore.block_scores`;
    a FAISS storage's rows), a block what its storage reads at once (`ExactStorage.block_rows`,
    indexer/format/served_index.py)."""
    total = int(storage.ntotal)
    q = np.asarray(queries, dtype=np.float32)
    block = storage.block_rows(CHUNK)
    for start in range(0, total, block):
        yield start, storage.block_products(start, min(start + block, total), q)


def decoded_blocks(storage: Any, first: int = 0) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, float32 [n, d]) blocks of every stored row, in row order (the shared
    store's p̂_D, `VectorStore.block`; a FAISS storage's rows), from the block that holds row
    `first` on (the blocks before it not read)."""
    total = int(storage.ntotal)
    block = storage.block_rows(CHUNK)
    for start in range(first // block * block, total, block):
        yield start, storage.block(start, min(start + block, total))


def row_products(storage: Any, rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """⟨p_i, q⟩ of the given rows for queries [Q, d], float32 [n, Q] (the store scores its
    rows without decoding them whole: VectorStore.rows_scores)."""
    return storage.rows_products(rows, np.asarray(queries, dtype=np.float32))


def with_hubs(features: np.ndarray, hubs: np.ndarray) -> np.ndarray:
    """Rows [x̃, h] [n, D + 1] of rows x̃ [n, D] and their hub values h [n], float32: a
    direction's hubness-corrected score s − h is their inner product with [t̃, −1]
    (`corrected_direction`)."""
    return np.hstack([np.asarray(features, np.float32), np.asarray(hubs, np.float32)[:, None]])


def corrected_direction(direction: np.ndarray) -> np.ndarray:
    """[t̃, −1] of a unit direction t̃ [D], float64 [D + 1] (`with_hubs`)."""
    return np.append(np.asarray(direction, dtype=np.float64), -1.0)


def sketch_width(dim: int) -> int:
    """The sketch's width for rows of `dim` coordinates: the next multiple of SKETCH_WIDTH (the
    rows and queries padded with zeros, `sketch_padded`)."""
    return -(-dim // SKETCH_WIDTH) * SKETCH_WIDTH


def sketch_padded(rows: np.ndarray) -> np.ndarray:
    """Rows [n, d] padded with zero coordinates to `sketch_width(d)`, float32, contiguous."""
    values = np.asarray(rows, dtype=np.float32)
    extra = sketch_width(values.shape[1]) - values.shape[1]
    return np.ascontiguousarray(np.pad(values, ((0, 0), (0, extra))) if extra else values)


def sketch_index(dim: int) -> faiss.Index:
    """An empty sketch of `dim`-dimensional rows (a multiple of SKETCH_WIDTH) for inner
    products (module doc)."""
    index = faiss.IndexPQFastScan(dim, max(1, dim // SKETCH_WIDTH), 4, faiss.METRIC_INNER_PRODUCT)
    index.pq.cp.min_points_per_centroid = 1  # a small sample trains it too, without FAISS's warning
    return index


def sketched(sample: np.ndarray, blocks: Iterator[np.ndarray]) -> faiss.Index:
    """The sketch trained on `sample` [n, d] (sampled rows), then holding every row from
    `blocks`, in row order; rows and the queries it is searched with are `sketch_padded`."""
    index = sketch_index(sketch_width(sample.shape[1]))
    index.train(sketch_padded(sample))
    for block in blocks:
        index.add(sketch_padded(block))
    return index
