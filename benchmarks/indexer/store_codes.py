"""How the shared store codes its rows: recall@10 of an exact scan of the codes at every prefix,
against exact float32 search, and bytes per row, for each coding in one run.

N × D spectrum rows (ann_tuning.spectrum_block: clustered, variance ∝ (j + 1)^−α, the order a
GraSP-VL rotation gives), float16-rounded as a cache holds them, coded as the store codes them
(indexer/format/store/):

- float16: each coordinate rounded;
- int8, one scale per row: the largest coordinate of the row at ±127 (stores written before
  the rotation);
- int8, rotated blocks (the default): each prefix block turned by its random orthogonal matrix
  and rounded on its own 8-bit grid.

At every prefix L of the contract (D/16 … D), each held-out gallery row's top 10 by s_L over
the decoded heads (leave one out) against the top 10 over the float32 rows: the quality ceiling
of every plan that reranks from the store (a funnel, a shortlist's rerank, a store-served Flat).
Bytes per row: the codes and the block scales (the head norms, 4·P more, come with every one).

    python -m benchmarks.indexer.store_codes --rows 1000000
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from benchmarks.indexer.ann_tuning import SHARD, spectrum_block
from indexer.format.store import (
    encode_rows,
    heads,
)
from indexer.format.store.block_codes import (
    block_ends,
    block_rotation,
    decode_heads,
    encode_rotated,
)
from indexer.format.store.top_k import merge_top_k
from indexer.format.tuning import drop_self
from training.core.metrics import neighbour_recall, prefix_vectors

K, CLUSTERS, ALPHA, SEED, SCAN = 10, 1024, 1.0, 0, 200_000


def top_k(gallery: np.ndarray, queries: np.ndarray, selves: np.ndarray) -> np.ndarray:
    """Each query's top k over the gallery rows by inner product, its own row dropped."""
    best = (np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64))
    for start in range(0, len(gallery), SCAN):
        block = gallery[start : start + SCAN]
        rows = np.arange(start, start + len(block))
        best = merge_top_k(best, queries @ block.T, rows, K + 1)
    return drop_self(best[1], selves, K)


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/store_codes.json"))
    args = parser.parse_args(argv)
    n, dim = args.rows, args.dim
    lengths = [dim // 16, dim // 8, dim // 4, dim // 2, dim]
    x = np.concatenate(
        [spectrum_block(s, n, dim, CLUSTERS, ALPHA, SEED) for s in range(0, n, SHARD)]
    )
    x = x.astype(np.float16).astype(np.float32)
    selves = np.sort(np.random.default_rng(7).choice(n, args.queries, replace=False))
    ends = block_ends(lengths, dim)
    rotation = block_rotation(ends, SEED)
    codes, scales = encode_rotated(x, rotation, ends)
    per_row = encode_rows(x, "int8")
    half = encode_rows(x, "float16")
    codings = {
        "float16": (lambda length: heads(half, length), 2 * dim),
        "int8, one scale per row": (lambda length: heads(per_row, length), dim),
        "int8, rotated blocks (default)": (
            lambda length: (
                heads(decode_heads(codes, scales, ends, length), length)
                @ rotation[:length, :length].T
            ),
            dim + 4 * len(ends),
        ),
    }
    result: dict = {"rows": n, "dim": dim, "k": K, "queries": len(selves), "codings": {}}
    for length in lengths:
        queries = prefix_vectors(x[selves], length)
        truth = top_k(prefix_vectors(x, length), queries, selves)
        for name, (decoded, _) in codings.items():
            found = top_k(decoded(length), queries, selves)
            recall = round(neighbour_recall(found, truth), 4)
            result["codings"].setdefault(name, {})[str(length)] = recall
            print(f"prefix {length:4d}  {name:32s} recall@10 {recall:.4f}", flush=True)
    for name, (_, row_bytes) in codings.items():
        result["codings"][name] = {
            "bytes_per_row": row_bytes,
            "recall_at_10": result["codings"][name],
        }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
