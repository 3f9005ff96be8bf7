"""An engine over its int8 store kept by blocks against the same bundle kept by rows, in one
process, side by side.

An int8 store kept one file a block (indexer/format/store/block_layout.py) is scanned block by
block with torch's weight-only int8 kernel, and a rerank gathers a candidate's codes from one
array a block; kept by rows (`store_vectors.npy` [N, D]), a scan multiplies the heads in place
with `torch._int_mm`. This opens the published version of `--bundles` and a copy of it whose
store is rewritten the other way (its manifest's store record and file records edited to
match), each with its own `SearchEngine` (verified, calibrated, as `strata serve` opens it),
and times `--queries` seeded random unit vectors at each
granularity, k = 10, on both, alternating which goes first each round; the first query of each
is dropped. Each engine's answers are checked to be the other's (the same rows).

Prints and writes p50 per granularity and layout, and rows over blocks. `--threads 1`: FAISS and
torch on one thread, as in each worker of `strata serve --workers` one per core.

    python -m benchmarks.service.layout.store_layout --bundles runs/demo/bundles-flickr8k
    python -m benchmarks.service.layout.store_layout --bundles runs/demo/bundles-flickr8k \\
        --threads 1
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import benchmark_parser, publish

GRANULARITIES = ("object", "attribute", "relation", "caption", "full")


def relaid(version: Path, folder: Path) -> tuple[str, Path]:
    """A bundles folder holding a copy of `version` (a rotated int8 store) whose codes are kept
    the other way (by blocks: one store_vectors.npy [N, D]; by rows: one file a block), its
    manifest edited to name and record them; that layout and the folder."""
    from indexer.format.manifest import MANIFEST
    from indexer.format.npy_stream import NpyStream
    from indexer.format.store import VECTORS
    from indexer.format.store.block_codes import block_ends
    from indexer.format.store.block_layout import BlockCodes, block_files, code_files

    copy = folder / version.name
    shutil.copytree(version, copy)
    manifest = json.loads((copy / MANIFEST).read_text())
    record, files = manifest["store"], manifest["files"]
    if not record or "rotation" not in record:
        raise SystemExit(f"{version}: no rotated int8 store to lay out another way")
    parts = [np.load(copy / name, allow_pickle=False) for name in code_files(record)]
    codes = np.asarray(BlockCodes(parts))
    ends = block_ends(record["lengths"], codes.shape[1])
    layout = "rows" if "blocks" in record else "blocks"
    names = [VECTORS] if layout == "rows" else block_files(ends)
    starts = (0, *ends[:-1]) if layout == "blocks" else (0,)
    stops = ends if layout == "blocks" else (codes.shape[1],)
    for name in code_files(record):
        (copy / name).unlink()
        del files[name]
    for name, start, stop in zip(names, starts, stops, strict=True):
        stream = NpyStream(copy / name, codes.dtype, len(codes), (stop - start,))
        stream.write(codes[:, start:stop])
        size = (copy / name).stat().st_size
        files[name] = {"sha256": stream.close(), "bytes": size, "rows": len(codes)}
    record.pop("blocks", None)
    record.pop("vectors", None)
    record |= {"vectors": VECTORS} if layout == "rows" else {"blocks": names}
    (copy / MANIFEST).write_text(json.dumps(manifest, indent=2))
    (folder / "CURRENT").write_text(version.name + "\n")
    return layout, folder


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--bundles", type=Path, default=Path("runs/demo/bundles-flickr8k"))
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, help="FAISS and torch threads (a worker of --workers = cores: 1)"
    )
    parser.add_argument("--json", type=Path, default=Path("runs/bench/store_layout.json"))
    args = parser.parse_args(argv)
    from indexer.format.manifest import read_current
    from service.engine.search import SearchEngine
    from service.results import SearchQuery

    version = args.bundles / read_current(args.bundles)
    with tempfile.TemporaryDirectory() as work:
        other, folder = relaid(version, Path(work))
        published = "rows" if other == "blocks" else "blocks"
        engines = {
            published: SearchEngine.open(args.bundles, device="cpu"),
            other: SearchEngine.open(folder, device="cpu"),
        }
        if args.threads:
            from service.engine.compute_threads import limit_threads

            limit_threads(args.threads)
        dim = engines["blocks"].bundle.dim
        vectors = np.random.default_rng(0).standard_normal((args.queries + 1, dim))
        queries = {
            g: [SearchQuery.of(vector=v.astype(np.float32), k=10, granularity=g) for v in vectors]
            for g in GRANULARITIES
        }
        times: dict[str, dict[str, list[float]]] = {
            layout: {g: [] for g in GRANULARITIES} for layout in engines
        }
        answers: dict[str, dict[str, list]] = {layout: {} for layout in engines}
        for round_ in range(args.rounds):
            order = list(engines) if round_ % 2 == 0 else list(reversed(engines))
            for granularity, batch in queries.items():
                for layout in order:
                    engine, found = engines[layout], []
                    for at, query in enumerate(batch):
                        started = time.perf_counter()
                        result = engine.search(query)
                        if at:
                            times[layout][granularity].append(time.perf_counter() - started)
                        found.append([hit.row for hit in result.hits])
                    answers[layout][granularity] = found
        same = {g: answers["rows"][g] == answers["blocks"][g] for g in GRANULARITIES}
    p50 = {
        layout: {g: round(statistics.median(t) * 1e3, 3) for g, t in by.items()}
        for layout, by in times.items()
    }
    figures = {
        "benchmark": "store_layout",
        "bundles": str(args.bundles),
        "published_layout": published,
        "rows": engines["blocks"].bundle.rows,
        "dim": dim,
        "queries": args.queries,
        "rounds": args.rounds,
        "threads": args.threads or "the engine's (every core)",
        "p50_ms": p50,
        "rows_over_blocks": {g: round(p50["rows"][g] / p50["blocks"][g], 2) for g in GRANULARITIES},
        "same_answers": same,
    }
    for g in GRANULARITIES:
        print(f"{g:10} rows {p50['rows'][g]:.3f} ms  blocks {p50['blocks'][g]:.3f} ms", flush=True)
    return publish(figures, args.json)


if __name__ == "__main__":
    main()
