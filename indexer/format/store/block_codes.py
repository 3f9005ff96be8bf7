"""Rotational scalar quantization by prefix blocks: the arithmetic of the shared store's int8
codes (indexer/format/store/ reads and writes the files).

The contract's prefix lengths L₁ < … < L_P cut a row of D coordinates into blocks [0, L₁),
[L₁, L₂), …, [L_P, D). R is block-diagonal, each block a random orthogonal matrix; a unit row
p is coded as y = pR, each block rounded on its own grid, c_b = round(y_b / s_b) with
s_b = max |y_b| / 127. A head p[:L] with L a block's end has (qR_L) · (c s)_L as its inner
product with a query q, so a search turns the query once and never decodes back. Pure
functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def block_ends(lengths: Sequence[int], dim: int) -> tuple[int, ...]:
    """Where the rotation's blocks end: the contract's prefix lengths, then D."""
    return tuple(sorted({int(n) for n in lengths} | {int(dim)}))


def block_rotation(ends: Sequence[int], seed: int = 0) -> np.ndarray:
    """R, block-diagonal [D, D]: block b a random orthogonal matrix (the Q of a seeded Gaussian's
    QR, its signs fixed so that it is unique), float32."""
    dim = int(ends[-1])
    rotation = np.zeros((dim, dim), dtype=np.float32)
    start = 0
    for block, end in enumerate(ends):
        width = end - start
        gaussian = np.random.default_rng([seed, block, width]).normal(size=(width, width))
        q, r = np.linalg.qr(gaussian)
        rotation[start:end, start:end] = q * np.where(np.diag(r) < 0, -1.0, 1.0)
        start = end
    return rotation


def rotation_blocks(rotation: np.ndarray, ends: Sequence[int]) -> list[np.ndarray]:
    """R's diagonal blocks, each its own contiguous [w_b, w_b] array (R is zero elsewhere)."""
    starts = (0, *ends[:-1])
    return [
        np.ascontiguousarray(rotation[start:end, start:end])
        for start, end in zip(starts, ends, strict=True)
    ]


def gathered_dots(
    parts: Sequence[np.ndarray],
    rows: np.ndarray,
    scales: np.ndarray,
    queries: np.ndarray,
    blocks: Sequence[np.ndarray],
) -> np.ndarray:
    """Inner products [Q, n] of queries [Q, L] (in the rows' own space, L a block's end) with
    the heads of code rows kept block by block (`parts`: [N, w_b] each, `rows` gathered from
    each; `scales` [n, B] theirs): block by block, the query's block turned by R's block, the
    rows' codes of that block gathered and scored, times their scale. No [n, L] head and no
    turned [Q, L] query are written whole: a rerank's cost is its B small products."""
    queries = np.asarray(queries, dtype=np.float32)
    length = queries.shape[1]
    dots = np.zeros((len(rows), len(queries)), dtype=np.float32)
    start = 0
    for block, (part, turn) in enumerate(zip(parts, blocks, strict=False)):
        if start >= length:
            break
        end = start + len(turn)
        turned = queries[:, start:end] @ turn
        codes = part.take(rows, axis=0).astype(np.float32)
        dots += (codes @ turned.T) * scales[:, block : block + 1]
        start = end
    return dots.T


def encode_rotated(
    unit_rows: np.ndarray, rotation: np.ndarray, ends: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """(codes int8 [n, D], scales float32 [n, B]) of unit rows p_D: each block rotated by its
    part of R, then rounded to ±127 of its own largest coordinate."""
    rows = np.asarray(unit_rows, dtype=np.float32)
    codes = np.empty(rows.shape, dtype="i1")
    scales = np.zeros((len(rows), len(ends)), dtype=np.float32)
    start = 0
    for block, end in enumerate(ends):
        turned = rows[:, start:end] @ rotation[start:end, start:end]
        peak = np.abs(turned).max(axis=1)
        scales[:, block] = peak / 127.0
        inverse = np.divide(127.0, peak, out=np.zeros_like(peak), where=peak > 0)
        codes[:, start:end] = np.clip(np.rint(turned * inverse[:, None]), -127, 127)
        start = end
    return codes, scales


def decode_heads(
    codes: np.ndarray, scales: np.ndarray | None, ends: Sequence[int], length: int
) -> np.ndarray:
    """The first `length` coordinates of code rows as float32, each block times its scale (in
    the rotated space; the codes themselves when there are no scales)."""
    head = np.asarray(codes[:, :length], dtype=np.float32)
    if scales is None:
        return head
    scales = np.asarray(scales, dtype=np.float32)
    start = 0
    for block, end in enumerate(ends):
        if start >= length:
            break
        head[:, start : min(end, length)] *= scales[:, block : block + 1]
        start = end
    return head


def block_dots(
    head: np.ndarray, scales: np.ndarray | None, queries: np.ndarray, ends: Sequence[int]
) -> np.ndarray:
    """Inner products [Q, n] of queries [Q, L] (in the rotated space) with code rows' heads
    [n, L] as float32, each block times its row's scale, L a block's end: one product of the
    heads with the queries laid out block by block ([L, Q·B'], zero outside each block), then
    the B' partial sums weighted by the scales, so no scaled [n, L] copy is written."""
    queries = np.asarray(queries, dtype=np.float32)
    if scales is None:
        return queries @ head.T
    length = head.shape[1]
    starts = [0, *[end for end in ends if end < length]]
    blocks = len(starts)
    laid = np.zeros((length, len(queries) * blocks), dtype=np.float32)
    for block, start in enumerate(starts):
        end = ends[block]
        laid[start:end, block::blocks] = queries[:, start:end].T
    partial = (head @ laid).reshape(len(head), len(queries), blocks)
    return np.einsum("nqb,nb->qn", partial, np.asarray(scales[:, :blocks], dtype=np.float32))
