"""The prefix space: GraSP rotation and exact search. Pure functions.

A gallery row x (unit norm, as the cache stores it) is rotated once with the GraSP artifact,

    z = (x − mean) @ Rᵀ                                 one matmul for a whole shard,

and the vector stored for prefix length L is its first L coordinates, renormalised:

    p_L(x) = z[:L] / ‖z[:L]‖                            (a zero prefix stays zero),

`training.core.metrics.prefix_vectors`, the one p_L of every stage (its recall too).

Every prefix index uses the inner product, so a score is s_L(q, x) = ⟨p_L(q), p_L(x)⟩, the cosine of
the first L rotated coordinates (docs/reference/metrics.md#prefix-similarity). Queries go through
the same two steps. The build computes both ROW_BLOCK rows at a time (`rotate_blocks`, and
`prefix_vectors` of row blocks): every row's numbers are the same, the temporaries smaller.
"""

from __future__ import annotations

import numpy as np

from training.core.artifacts import TransformArtifact

ROW_BLOCK = 8192  # rows per block of the build's rotation and renormalisation


def rotate_rows(embeddings: np.ndarray, grasp: TransformArtifact) -> np.ndarray:
    """z = (x − mean) @ Rᵀ for every row, float32 [N, D] (float16 input is widened first)."""
    return grasp.apply(np.asarray(embeddings, dtype=np.float32))


def rotate_blocks(
    embeddings: np.ndarray,
    grasp: TransformArtifact,
    block: int = ROW_BLOCK,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """`rotate_rows`, `block` rows at a time into one output array (`out` when given, float32
    [N, D]): each row's product is the same computation (equal up to float32 rounding: BLAS
    may pick another kernel, summing in another order, for another block shape), but the
    temporaries are one block, which a large shard does not page in afresh."""
    x = np.asarray(embeddings)  # float16 rows are widened block by block
    if x.ndim != 2 or x.shape[1] != grasp.dim:
        raise ValueError(f"expected embeddings of shape [N, {grasp.dim}], got {x.shape}")
    shape = (len(x), grasp.dim)
    if out is not None and (out.shape != shape or out.dtype != np.float32):
        raise ValueError(f"out must be float32 {shape}, got {out.dtype} {out.shape}")
    rotated = np.empty(shape, dtype=np.float32) if out is None else out
    for start in range(0, len(x), block):
        stop = start + block
        centred = np.asarray(x[start:stop], dtype=np.float32) - grasp.mean
        np.matmul(centred, grasp.rotation.T, out=rotated[start:stop])
    return rotated


def exact_top_k(gallery: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force inner-product top-k: (scores [Q, k], rows [Q, k]), best first, ties by row."""
    scores = np.asarray(queries, dtype=np.float32) @ np.asarray(gallery, dtype=np.float32).T
    k = min(k, scores.shape[1])
    rows = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, rows, axis=1), rows
