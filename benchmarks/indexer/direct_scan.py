"""A direct scan of the int8 store in integer arithmetic, kept by blocks and kept by rows,
against the same scan in floats and FAISS's exact search over float32 rows; side by side, one
thread.

A prefix the plan serves as a direct scan (a small gallery, a filtered search, a funnel's
calibration, a level no funnel reaches recall at) reads every row's int8 head. Arms, each batch
of queries timed one after another in every round (drift in a shared machine falls on all
alike), medians:

- `blocks`: `VectorStore.scan` over a store kept by blocks, the layout an index build writes
  (indexer/format/store/block_layout.py): each block's contiguous codes through torch's
  weight-only int8 kernel, the rows within its bf16 bound of the k-th best scored in floats
  (indexer/format/store/kernel_scan.py), where L ≥ INTEGER_WIDTH × the queries, else in floats;
- `rows`: the same rows kept row by row (`store_vectors.npy`, the layout before), scanned with
  `torch._int_mm` over the heads as they lie (indexer/format/store/integer_scan.py) where the
  batch allows;
- `float`: the store kept by blocks read in floats (`VectorStore.integer_scannable` off): every
  block widened to float32 and multiplied in floats;
- `faiss float32`: `IndexFlatIP.search` over the rows' decoded float32 heads (a bundle without
  a store: 4 bytes a coordinate in RAM against the store's 1).

N × D spectrum rows (benchmarks.indexer.ann_tuning.spectrum_block), coded into an int8 store
with the rotated blocks an index build writes; the queries are rows of another seed. Both
layouts' answers are checked against the float scan's (the same top-k scores, to 1e-5). At
D = 384 the two first blocks are 24 wide, which the kernel does not take: they are scored in
float32 on the spot (`--dim 384`).

    python -m benchmarks.indexer.direct_scan                     # 100,000 × 512
    python -m benchmarks.indexer.direct_scan --rows 40000 --dim 384 --json /tmp/scan-384.json
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
from indexer.format.store.writer import StoreWriter, store_record, write_rotation
from service.engine.compute_threads import limit_threads
from training.core.metrics import prefix_vectors

K, CLUSTERS, ALPHA, SEED = 10, 1024, 1.0, 0


class FloatScan(VectorStore):
    """The store read as before the integer scan: every block widened to float32."""

    def integer_scannable(self, length: int, k: int, queries: int = 1) -> bool:
        return False


def write_store(folder: Path, rows: int, dim: int, lengths: list[int], layout: str) -> dict:
    """An int8 store of `rows` spectrum rows, with the index build's rotated blocks, kept by
    `layout`; its record."""
    ends = block_ends(lengths, dim)
    rotation = block_rotation(ends)
    folder.mkdir()
    writer = StoreWriter(folder, rows, dim, lengths, "int8", rotation=rotation, layout=layout)
    for start in range(0, rows, SHARD):
        writer.add(spectrum_block(start, rows, dim, CLUSTERS, ALPHA, SEED))
    writer.close()
    write_rotation(folder, rotation)
    blocks = ends if layout == "blocks" else None
    return store_record("int8", lengths, rotated=True, blocks=blocks)


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
        stores = {
            layout: (Path(folder) / layout, write_store(Path(folder) / layout, *shape, layout))
            for layout, shape in (
                ("blocks", (args.rows, args.dim, lengths)),
                ("rows", (args.rows, args.dim, lengths)),
            )
        }
        served, plain = (VectorStore(*stores[layout]) for layout in ("blocks", "rows"))
        before = FloatScan(*stores["blocks"])
        for length in lengths:
            flat = faiss.IndexFlatIP(length)
            flat.add(served.block(0, served.rows, length))
            for batch in batches:
                queries = prefix_vectors(held_out[:batch], length)
                got = served.scan(queries, length, K)
                old = plain.scan(queries, length, K)
                want = before.scan(queries, length, K)
                np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-5)
                np.testing.assert_allclose(old[0], want[0], rtol=0, atol=1e-5)
                ms = timed(
                    {
                        "blocks": lambda q=queries, n=length: served.scan(q, n, K),
                        "rows": lambda q=queries, n=length: plain.scan(q, n, K),
                        "float": lambda q=queries, n=length: before.scan(q, n, K),
                        "faiss float32": lambda q=queries, f=flat: f.search(q, K),
                    },
                    args.rounds,
                )
                row = {
                    "length": length,
                    "queries": batch,
                    "ms": ms,
                    "rows_over_blocks": round(ms["rows"] / ms["blocks"], 2),
                    "float_over_blocks": round(ms["float"] / ms["blocks"], 2),
                    "faiss_float32_over_blocks": round(ms["faiss float32"] / ms["blocks"], 2),
                    "same_rows": bool((got[1] == want[1]).all()),
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
