"""A direct scan of an int8 store in integer arithmetic, with the float scan's answer.

The float scan (VectorStore.scan) widens every row's int8 head to float32 and multiplies it by
the turned queries: at 100,000 × 512 two thirds of a one-query scan is that widening and a
product with as many columns as the query has blocks. Here each query's turned blocks are
rounded to int8 too, each on its own grid (t̂_b = σ_b·Q_b, σ_b = max |t_b| / 127), so a block's
products are int8 · int8 sums read straight off the codes (`torch._int_mm`, int32), and

    a(x) = Σ_b σ_b s_b(x) ⟨Q_b, c_b(x)⟩ / ‖x_L‖          (s_b the row's block scales)

approximates the float score s(x) = Σ_b s_b(x) ⟨t_b, c_b(x)⟩ / ‖x_L‖ within a bound ε that
depends on the query alone. Each coordinate of t̂_b is within σ_b / 2 of t_b, so by
Cauchy–Schwarz within each block and then across them (Σ_b s_b²‖c_b‖² = ‖x_L‖²),

    |s(x) − a(x)| ≤ Σ_b (σ_b / 2) √w_b s_b ‖c_b(x)‖ / ‖x_L‖ ≤ ε = ½ √(Σ_b w_b σ_b²)

(w_b the block's width). Let A_k be the k-th largest a and E_k the k-th largest s. At most k − 1
rows have s > E_k, and a(x) > E_k + ε implies s(x) > E_k, so A_k ≤ E_k + ε; a row of the exact
top k has a(x) ≥ s(x) − ε ≥ E_k − ε ≥ A_k − 2ε. So every row with a(x) ≥ A_k − 2ε is kept as a
candidate (the running A_k only rises, so a row left out early stays out), the candidates are
scored as the float scan scores them, and the answer is the float scan's top k. Pure functions;
the store (indexer/format/store/) reads its codes and calls them.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

COLUMNS = 8  # the integer product's columns come in multiples of this (torch._int_mm)
BLOCK_BYTES = 2**23  # the codes a block of the scan reads (32,768 rows at 256 columns)
# added to ε: both scores are sums of at most D float32 products of unit-sized terms, each
# rounded (a relative 6·10⁻⁸ a term), so their own arithmetic may differ by far less than this
FLOAT_SLACK = 1e-4


@dataclass(frozen=True)
class RoundedQueries:
    """Queries [Q, L] turned into the rotated space, rounded block by block to int8."""

    laid: np.ndarray  # int8 [L, C]: column b·Q + q holds query q's block b, zeros elsewhere
    steps: np.ndarray  # float32 [Q, B]: σ_b of each query's block
    bound: np.ndarray  # float64 [Q]: ε (+ FLOAT_SLACK), how far a(x) may be from s(x)
    blocks: int  # B: the blocks a head of length L spans


def rounded_queries(turned: np.ndarray, ends: Sequence[int]) -> RoundedQueries:
    """Each query's blocks [start, end) (the store's block ends up to L = turned.shape[1]),
    rounded to ±127 of its own largest coordinate, laid out for one integer product."""
    q = np.asarray(turned, dtype=np.float32)
    count, length = q.shape
    starts = [0, *[end for end in ends if end < length]]
    stops = [*starts[1:], length]
    blocks = len(starts)
    columns = max(COLUMNS, -(-count * blocks // COLUMNS) * COLUMNS)
    laid = np.zeros((length, columns), dtype=np.int8)
    steps = np.zeros((count, blocks), dtype=np.float32)
    spread = np.zeros(count, dtype=np.float64)
    for block, (start, stop) in enumerate(zip(starts, stops, strict=True)):
        part = q[:, start:stop]
        step = np.abs(part).max(axis=1) / np.float32(127.0)
        inverse = np.divide(1.0, step, out=np.zeros_like(step), where=step > 0)
        codes = np.clip(np.rint(part * inverse[:, None]), -127, 127).astype(np.int8)
        laid[start:stop, block * count : (block + 1) * count] = codes.T
        steps[:, block] = step
        spread += (stop - start) * step.astype(np.float64) ** 2
    return RoundedQueries(laid, steps, 0.5 * np.sqrt(spread) + FLOAT_SLACK, blocks)


def approximate_scores(
    products: np.ndarray, scales: np.ndarray, norms: np.ndarray, rounded: RoundedQueries
) -> np.ndarray:
    """a(x) [Q, n] from the integer products [n, C] of n rows' codes with `rounded.laid`, the
    rows' block scales [n, ≥ B] and head norms [n] (0 for a zero head, as the float scan):
    block by block on the products' [n, Q] columns of that block, turned once at the end."""
    count, blocks = rounded.steps.shape
    scales = np.asarray(scales, dtype=np.float32)
    dots = np.zeros((len(products), count), dtype=np.float32)
    for block in range(blocks):
        terms = products[:, block * count : (block + 1) * count].astype(np.float32)
        terms *= scales[:, block : block + 1]
        terms *= rounded.steps[:, block]
        dots += terms
    norms = np.asarray(norms, dtype=np.float32)[:, None]
    np.divide(dots, norms, out=dots, where=norms > 0)
    return np.ascontiguousarray(dots.T)


def best_values(best: np.ndarray, approx: np.ndarray, k: int) -> np.ndarray:
    """float32 [Q, ≤ k]: the k largest a so far, largest first, from those before (`best`) and
    a new block's [Q, n]. Only the values: the k-th is the floor of the candidates, and the
    answer is read from the candidates rescored, so which of tied rows is counted is moot
    (torch's top k of a block: a sixth of numpy's argpartition at 40,000 columns)."""
    import torch

    take = min(k, approx.shape[1])
    if take == 0:
        return best
    top = torch.topk(torch.from_numpy(approx), take, dim=1, sorted=False).values.numpy()
    merged = np.concatenate([best, top], axis=1)
    return -np.sort(-merged, axis=1)[:, :k]


def kth_value(best: np.ndarray, k: int) -> np.ndarray:
    """float64 [Q]: each query's k-th largest a so far (`best_values`), −inf before k are seen."""
    if best.shape[1] < k:
        return np.full(len(best), -np.inf)
    return best[:, k - 1].astype(np.float64)


def kept_candidates(
    approx: np.ndarray, rows: np.ndarray, floor: np.ndarray, bound: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query index, row, a) of the entries of a block [Q, n] (its `rows` [n]) with a ≥ the
    query's running A_k − 2ε (`floor` [Q]: −inf until k rows are seen)."""
    keep = approx >= (floor - 2.0 * bound)[:, None]
    which, at = np.nonzero(keep)
    return which, rows[at], approx[which, at]


@cache
def integer_product() -> object | None:
    """torch._int_mm where this torch has it for the CPU (checked once on a small product),
    else None: the store then scans in floats."""
    try:
        import torch

        probe = torch._int_mm(
            torch.ones((2 * COLUMNS, COLUMNS), dtype=torch.int8),
            torch.ones((COLUMNS, COLUMNS), dtype=torch.int8),
        )
        if int(probe[0, 0]) != COLUMNS:
            return None
    except (ImportError, AttributeError, RuntimeError):
        return None
    return torch._int_mm


def integer_products(
    codes: np.ndarray, start: int, stop: int, length: int, laid: np.ndarray
) -> np.ndarray:
    """int32 [stop − start, C]: the heads [start:stop, :length] of a store's int8 codes [N, D]
    (read-only pages allowed) times `laid` [length, C], read where they lie (no copy of the
    heads first: a copy cost a third of a scan at 256 of 512 columns)."""
    import torch

    product = integer_product()
    assert product is not None
    with warnings.catch_warnings():  # a mapped store is read-only; nothing here writes to it
        warnings.simplefilter("ignore", UserWarning)
        whole = torch.from_numpy(codes)
    return product(whole[start:stop, :length], torch.from_numpy(laid)).numpy()
