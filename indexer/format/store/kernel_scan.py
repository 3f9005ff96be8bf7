"""A direct scan of a store kept by blocks, with torch's weight-only int8 kernel and the float
scan's answer.

torch's `_weight_int8pack_mm(A, W, s)` computes A Wᵀ diag(s) for bf16 A [Q, K], int8 W [N, K]
read as it lies (contiguous) and bf16 row scales s [N]: each code widened and times its row's
scale in float32, the products summed in float32, the sum rounded to bf16. A block of a store
kept by blocks (indexer/format/store/block_layout.py) is such a W, with its rows' block scales
s_b(x) as s, so a head of L (a block's end) is scored as

    a(x) = Σ_b K(t_b, c_b, s_b)(x) / ‖x_L‖      (t = qR_L, the turned query; c_b the codes)

against the float scan's s(x) = Σ_b s_b(x) ⟨t_b, c_b(x)⟩ / ‖x_L‖. Three roundings to bf16 part
them (8 significant bits, each within a relative u = 2⁻⁹): the query's coordinates, the scale,
and the block's sum; the float32 sums add a relative K·2⁻²⁴, far below u. Each is within
u s_b ‖t_b‖ ‖c_b‖ of its block's exact term (Cauchy–Schwarz on Σ|t_i c_i|), so across the
blocks, with Σ_b s_b²‖c_b‖² = ‖x_L‖² and Σ_b ‖t_b‖² = ‖q‖²,

    |s(x) − a(x)| ≤ 3u (1 + u)² Σ_b s_b ‖t_b‖ ‖c_b‖ / ‖x_L‖ ≤ ε = 4u ‖q‖

(the fourth u covers the second-order terms and the float32 sums). From there the scan is the
integer scan's (indexer/format/store/integer_scan.py): every row within 2ε of the running k-th
best a is a candidate, and the candidates scored as the float scan scores them give its top k.

The kernel's vector code loads 16 coordinates at a time from 16-byte-aligned rows, so a block
goes to it only when its width is a multiple of 16 and its array is aligned (`kernel_ready`).
Any other block (the 24-wide first blocks of a 384-dimensional model) is scored in float32: its
codes widened and multiplied with the query's block, exact but for float32's sums (α_b = 0).
Such a block was once multiplied in int8 by `torch._int_mm`, which on the CPU ran many times
slower than the float product (`python -m benchmarks.indexer.direct_scan --dim 384`). With α_b
the block's factor (4u‖t_b‖ for the kernel, 0 in float32), the same Cauchy–Schwarz across the
blocks gives ε = √(Σ_b α_b²), which is 4u‖q‖ when the kernel takes every block. Pure
functions; the store reads its files and calls them.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from indexer.format.store.block_layout import LANES
from indexer.format.store.integer_scan import FLOAT_SLACK

ALIGNMENT = 16  # bytes: where a block's rows must start for the kernel's aligned loads
UNIT = 2.0**-9  # bf16's relative rounding error (8 significant bits)
KERNEL_BOUND = 4 * UNIT  # ε / ‖q‖ (module doc)
# the codes a block of the scan reads: 65,536 rows at 512 columns (the kernel streams them; a
# fourth of this, 8 MB, was 5-10 % slower at 512 for 1 to 16 queries, from the work per block)
KERNEL_BLOCK_BYTES = 2**25


@dataclass(frozen=True)
class TurnedPart:
    """One block of a query batch's turned queries, as its scorer takes it."""

    block: int
    kernel: bool  # scored by the kernel (values bf16 [Q, w]), else in float32 ([Q, w])
    values: object  # a torch tensor


@dataclass(frozen=True)
class TurnedBlocks:
    """One query batch's turned blocks, each as the block's scorer takes it."""

    parts: list[TurnedPart]
    bound: np.ndarray  # float64 [Q]: ε (+ FLOAT_SLACK), how far a(x) may be from s(x)


@cache
def weight_kernel() -> object | None:
    """torch's `_weight_int8pack_mm` where this torch has it and it answers a small product as
    the module doc says it does; else None (the store then scans as before)."""
    try:
        import torch

        kernel = torch.ops.aten._weight_int8pack_mm
        codes = torch.arange(-64, 64, dtype=torch.int8).reshape(4, 2 * LANES)
        query = torch.ones((1, 2 * LANES), dtype=torch.bfloat16)
        scales = torch.full((4,), 0.5, dtype=torch.bfloat16)
        answer = kernel(query, codes, scales).float().numpy()[0]
        expected = codes.float().sum(dim=1).numpy() * 0.5
        if not np.allclose(answer, expected, rtol=2 * UNIT, atol=0):
            return None
    except (ImportError, AttributeError, RuntimeError):
        return None
    return kernel


def kernel_ready(codes: np.ndarray) -> bool:
    """Whether the kernel may read a block's codes [N, w] as they lie (module doc)."""
    return (
        codes.dtype == np.int8
        and codes.shape[1] % LANES == 0
        and codes.flags.c_contiguous
        and codes.ctypes.data % ALIGNMENT == 0
    )


def turned_blocks(turned: np.ndarray, ends: Sequence[int], ready: Sequence[bool]) -> TurnedBlocks:
    """Queries [Q, L] in the rotated space cut at the block ends up to L (`ready[b]`: whether
    block b goes to the kernel), each part as its scorer takes it, and ε = √(Σ_b α_b²)."""
    import torch

    q = np.asarray(turned, dtype=np.float32)
    count, length = q.shape
    starts = [0, *[end for end in ends if end < length]]
    parts: list[TurnedPart] = []
    spread = np.zeros(count, dtype=np.float64)  # Σ_b α_b²
    for block, start in enumerate(starts):
        part = np.ascontiguousarray(q[:, start : ends[block]])
        if ready[block]:
            parts.append(TurnedPart(block, True, torch.from_numpy(part).to(torch.bfloat16)))
            spread += (KERNEL_BOUND * np.linalg.norm(part.astype(np.float64), axis=1)) ** 2
        else:
            parts.append(TurnedPart(block, False, torch.from_numpy(part)))
    return TurnedBlocks(parts, np.sqrt(spread) + FLOAT_SLACK)


def kernel_scores(
    blocks: TurnedBlocks,
    codes: Sequence[np.ndarray],
    scales: np.ndarray,
    norms: np.ndarray,
) -> np.ndarray:
    """a(x) [Q, n] of n rows from their codes, one array [n, w_b] a block (a row range of the
    block files, read-only pages allowed), their block scales [n, ≥ B] and head norms [n]
    (0 for a zero head, as the float scan)."""
    import torch

    kernel = weight_kernel()
    scales = np.asarray(scales, dtype=np.float32)
    total: torch.Tensor | None = None
    with warnings.catch_warnings():  # a mapped store is read-only; nothing here writes to it
        warnings.simplefilter("ignore", UserWarning)
        for part in blocks.parts:
            column = torch.from_numpy(np.ascontiguousarray(scales[:, part.block]))
            weights = torch.from_numpy(codes[part.block])
            if part.kernel:
                term = kernel(part.values, weights, column.to(torch.bfloat16)).float()
            else:  # scored in float32 (module doc)
                term = (part.values @ weights.float().T) * column
            total = term if total is None else total.add_(term)
    assert total is not None
    approx = total.numpy()
    norms = np.asarray(norms, dtype=np.float32)[None, :]
    np.divide(approx, norms, out=approx, where=norms > 0)  # a zero head's codes sum to 0
    return approx
