"""A direct scan of the int8 store in integer arithmetic against the same scan in floats, and
against FAISS's exact search over float32 rows; side by side, one thread.

A prefix the plan serves as a direct scan (a small gallery, a filtered search, a funnel's
calibration, a level no funnel reaches recall at) reads every row's int8 head. Arms, each batch
of queries timed one after another in every round (drift in a shared machine falls on all
alike), medians:

- `integer`: `VectorStore.integer_scan` (indexer/format/store/integer_scan.py: the queries
  rounded to int8 block by block, the codes multiplied as they lie, the rows within the
  rounding's bound of the k-th best scored in floats), which `VectorStore.scan` serves where
  L ≥ INTEGER_WIDTH × the queries;
- `float`: the scan before, every block widened to float32 and multiplied in floats
  (`VectorStore.integer_scannable` off);
- `faiss float32`: `IndexFlatIP.search` over the rows' decoded float32 heads (a bundle without
  a store: 4 bytes a coordinate in RAM against the store's 1);
- `product in place` and `product contiguous`: the integer scan's product alone, over the
  heads as the store lays them (rows of D codes, the first L read) and over a copy of the heads
  made before the timing (rows of L codes): what a layout that kept each prefix's codes
  together would save the product (the store keeps rows whole, as FAISS and the rerank's
  gathers want them);
- `bf16 kernel contiguous`: torch's weight-only int8 kernel (`_weight_int8pack_mm`, bf16
  queries times int8 rows with one scale a row) over that copy: what a kernel other than
  `torch._int_mm` would take for the product (it wants the rows contiguous and one scale a
  row, where the store has a scale a row and block, so it needs the layout above too).
- `blockwise scan (prototype)`: the whole scan as a store laid out block by block could run it
  (`BlockwiseLayout`, built here from the store before the timing): per block b, the kernel
  above over that block's contiguous codes with the rows' block scales s_b(x) as its row
  scales, the blocks' outputs summed and divided by the head norms into a(x); bf16 rounds the
  query, the scales and each block's output (each relative 2⁻⁹), so |a(x) − s(x)| ≤ ε =
  4·2⁻⁹·‖q‖ (Cauchy–Schwarz across blocks, as indexer/format/store/integer_scan.py argues for
  its own rounding), and the rows within 2ε of the k-th best a are scored as the float scan
  scores them: its answer is checked against the float scan's like the integer scan's.

N × D spectrum rows (benchmarks.indexer.ann_tuning.spectrum_block), coded into an int8 store
with the rotated blocks an index build writes; the queries are rows of another seed. The
integer scan's answers are checked against the float scan's (the same top-k scores, to 1e-5).

    python -m benchmarks.indexer.direct_scan                     # 100,000 × 512
    python -m benchmarks.indexer.direct_scan --rows 20000 --json /tmp/direct_scan.json
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from benchmarks.indexer.ann_tuning import SHARD, spectrum_block
from indexer.format.store import VectorStore
from indexer.format.store.block_codes import block_ends, block_rotation
from indexer.format.store.integer_scan import FLOAT_SLACK, integer_products, rounded_queries
from indexer.format.store.writer import StoreWriter, store_record, write_rotation
from service.engine.compute_threads import limit_threads
from training.core.metrics import prefix_vectors

K, CLUSTERS, ALPHA, SEED = 10, 1024, 1.0, 0


class FloatScan(VectorStore):
    """The store read as before the integer scan: every block widened to float32."""

    def integer_scannable(self, length: int, k: int, queries: int = 1) -> bool:
        return False


def write_store(folder: Path, rows: int, dim: int, lengths: list[int]) -> None:
    """An int8 store of `rows` spectrum rows, with the index build's rotated blocks."""
    rotation = block_rotation(block_ends(lengths, dim))
    writer = StoreWriter(folder, rows, dim, lengths, "int8", rotation=rotation)
    for start in range(0, rows, SHARD):
        writer.add(spectrum_block(start, rows, dim, CLUSTERS, ALPHA, SEED))
    writer.close()
    write_rotation(folder, rotation)


def weight_kernel(queries: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """[Q, N] from torch's weight-only int8 kernel: bf16 queries times contiguous int8 heads,
    every row's scale 1 (the arm's cost, not an answer)."""
    import torch

    rows = torch.from_numpy(heads)
    scales = torch.ones(len(heads), dtype=torch.bfloat16)
    product = torch.ops.aten._weight_int8pack_mm
    return product(torch.from_numpy(queries).to(torch.bfloat16), rows, scales).float().numpy()


BF16_BOUND = 4 * 2.0**-9  # ε per unit of ‖q‖: query, scales and outputs each rounded (see above)


class BlockwiseLayout:
    """The store's codes copied block by block (each block's codes contiguous, [N, w_b]) with
    the rows' block scales: the layout a store written block by block would map, scanned with
    torch's weight-only int8 kernel (`blockwise scan (prototype)` above)."""

    def __init__(self, store: VectorStore) -> None:
        import torch

        assert store.rotation is not None and store.scales is not None
        self.store = store
        starts = (0, *store.ends[:-1])
        self.blocks = [
            (
                start,
                end,
                torch.from_numpy(np.ascontiguousarray(store.codes[:, start:end])),
                torch.from_numpy(np.asarray(store.scales[:, b], np.float32)).to(torch.bfloat16),
            )
            for b, (start, end) in enumerate(zip(starts, store.ends, strict=True))
        ]
        self.norms = {
            length: torch.from_numpy(np.array(store.norms[:, at], dtype=np.float32))
            for at, length in enumerate(store.lengths)
        }

    def scan(self, queries: np.ndarray, length: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k by s_L (scores [Q, k], rows [Q, k]), as VectorStore.scan answers."""
        import torch

        store = self.store
        q = np.asarray(queries, dtype=np.float32)
        turned = torch.from_numpy(q @ store.rotation[:length, :length])
        total = torch.zeros((len(q), store.rows), dtype=torch.float32)
        for start, end, codes, scales in self.blocks:
            if end > length:
                break
            part = turned[:, start:end].to(torch.bfloat16).contiguous()
            total += torch.ops.aten._weight_int8pack_mm(part, codes, scales).float()
        norms = self.norms[length]
        approx = torch.where(norms > 0, total / norms, torch.zeros_like(total))
        kth = torch.topk(approx, min(k, store.rows), dim=1).values[:, -1:]
        bound = BF16_BOUND * np.linalg.norm(q, axis=1) + FLOAT_SLACK
        floor = kth - 2.0 * torch.from_numpy(bound.astype(np.float32))[:, None]
        scores = np.full((len(q), k), -np.inf, dtype=np.float32)
        found = np.full((len(q), k), -1, dtype=np.int64)
        for i in range(len(q)):
            rows = torch.nonzero(approx[i] >= floor[i]).reshape(-1).numpy()
            exact = store.rows_scores(rows, length, q[i : i + 1])[0]
            order = np.lexsort((rows, -exact))[:k]
            scores[i, : len(order)], found[i, : len(order)] = exact[order], rows[order]
        return scores, found


def timed(arms: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median ms of each arm over `rounds`, the arms one after another in every round."""
    times: dict[str, list[float]] = {name: [] for name in arms}
    for arm in arms.values():
        arm()  # warm: the pages in
    for _ in range(rounds):
        for name, arm in arms.items():
            started = time.perf_counter()
            arm()
            times[name].append((time.perf_counter() - started) * 1e3)
    return {name: round(statistics.median(t), 2) for name, t in times.items()}


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--batches", default="1,4,16,64", help="queries a scan")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/direct_scan.json"))
    args = parser.parse_args(argv)
    import faiss

    limit_threads(1)  # a served worker's share of two cores
    lengths = [args.dim // 16, args.dim // 8, args.dim // 4, args.dim // 2, args.dim]
    batches = [int(b) for b in args.batches.split(",")]
    held_out = spectrum_block(0, SHARD, args.dim, CLUSTERS, ALPHA, SEED + 1)[: max(batches)]
    figures = []
    with tempfile.TemporaryDirectory() as folder:
        write_store(Path(folder), args.rows, args.dim, lengths)
        record = store_record("int8", lengths, rotated=True)
        served, before = VectorStore(Path(folder), record), FloatScan(Path(folder), record)
        for length in lengths:
            flat = faiss.IndexFlatIP(length)
            flat.add(served.block(0, served.rows, length))
            heads = np.ascontiguousarray(served.codes[:, :length])
            layout = BlockwiseLayout(served)
            for batch in batches:
                queries = prefix_vectors(held_out[:batch], length)
                laid = rounded_queries(queries, served.ends).laid  # its shape is what counts
                got = served.integer_scan(queries, length, K)
                want = before.scan(queries, length, K)
                np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-5)
                prototype = layout.scan(queries, length, K)
                np.testing.assert_allclose(prototype[0], want[0], rtol=0, atol=1e-5)
                ms = timed(
                    {
                        "integer": lambda q=queries, n=length: served.integer_scan(q, n, K),
                        "float": lambda q=queries, n=length: before.scan(q, n, K),
                        "faiss float32": lambda q=queries, f=flat: f.search(q, K),
                        "product in place": lambda n=length, a=laid: integer_products(
                            served.codes, 0, served.rows, n, a
                        ),
                        "product contiguous": lambda n=length, a=laid, h=heads: integer_products(
                            h, 0, len(h), n, a
                        ),
                        "bf16 kernel contiguous": lambda q=queries, h=heads: weight_kernel(q, h),
                        "blockwise scan (prototype)": lambda q=queries, n=length, b=layout: b.scan(
                            q, n, K
                        ),
                    },
                    args.rounds,
                )
                row = {
                    "length": length,
                    "queries": batch,
                    "ms": ms,
                    "float_over_integer": round(ms["float"] / ms["integer"], 2),
                    "faiss_float32_over_integer": round(ms["faiss float32"] / ms["integer"], 2),
                    "product_over_bf16_kernel": round(
                        ms["product in place"] / ms["bf16 kernel contiguous"], 2
                    ),
                    "product_in_place_over_contiguous": round(
                        ms["product in place"] / ms["product contiguous"], 2
                    ),
                    "same_rows": bool((got[1] == want[1]).all()),
                    "prototype_same_rows": bool((prototype[1] == want[1]).all()),
                    "integer_over_prototype": round(
                        ms["integer"] / ms["blockwise scan (prototype)"], 2
                    ),
                    "served": "integer" if served.integer_scannable(length, K, batch) else "float",
                }
                figures.append(row)
                print(row, flush=True)
    return publish(
        {"benchmark": "direct_scan", "rows": args.rows, "dim": args.dim, "k": K, "scans": figures},
        args.json,
    )


if __name__ == "__main__":
    main()
