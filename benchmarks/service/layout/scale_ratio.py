"""What ten times the rows costs a query: two bundles of the scale benchmark served in one process,
their queries interleaved, the p50 ratio per granularity.

The scale benchmark (benchmarks/service/layout/scale.py) serves each size in a process of its
own, runs minutes apart; on a shared machine the p50 of one run against another's moves by a
third. Here both bundles (by default the 10M and the 1M run's) are opened, their funnels calibrated
(service/engine/plans.py), and then, per granularity, each round times every held-out query of
the large bundle and every held-out query of the small one in alternation (one thread, the plan
the engine runs unfiltered: benchmarks/service/layout/memory.strata_search), so the machine's
drift hits both alike. Prints and writes per granularity the plan of each, their p50 and the ratio
large / small.

    python -m benchmarks.service.layout.scale --rows 10000000 --work runs/bench/scale
    python -m benchmarks.service.layout.scale --rows 1000000 --work runs/bench/scale-1m
    python -m benchmarks.service.layout.scale_ratio
"""

from __future__ import annotations

import time
from pathlib import Path

import faiss
import numpy as np

from benchmarks.harness import benchmark_parser, publish
from benchmarks.service.layout.memory import reranks_per_query, strata_search
from benchmarks.service.layout.scale import held_out, held_out_rows
from indexer.format.bundle import Bundle


def served(work: Path, rows: int, queries: int) -> tuple[Bundle, object, np.ndarray]:
    """A scale run's bundle, loaded and calibrated, and its held-out rows rotated."""
    from service.engine.plans import Planner

    bundle = Bundle.open(work / "bundles")
    if bundle.rows != rows:
        raise SystemExit(f"scale_ratio: {work} holds {bundle.rows:,} rows, not {rows:,}")
    bundle.load()
    planner = Planner(bundle)
    rotated = bundle.rotate(held_out_rows(held_out(rows, queries), rows, bundle.dim))
    return bundle, planner, rotated


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--large", type=Path, default=Path("runs/bench/scale"))
    parser.add_argument("--large-rows", type=int, default=10_000_000)
    parser.add_argument("--small", type=Path, default=Path("runs/bench/scale-1m"))
    parser.add_argument("--small-rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/scale_ratio.json"))
    args = parser.parse_args(argv)
    faiss.omp_set_num_threads(1)
    sides = {
        "large": served(args.large, args.large_rows, args.queries),
        "small": served(args.small, args.small_rows, args.queries),
    }
    result: dict = {
        "large": {"work": str(args.large), "rows": args.large_rows},
        "small": {"work": str(args.small), "rows": args.small_rows},
        "queries": args.queries,
        "rounds": args.rounds,
        "granularities": {},
    }
    contract = sides["large"][0].contract
    for granularity, length in sorted(contract.items(), key=lambda g: g[1]):
        searches, entry = {}, {}
        for side, (bundle, planner, _) in sides.items():
            search, plan = strata_search(bundle, planner, length)
            searches[side] = search
            entry[f"{side}_plan"] = plan
            entry[f"{side}_reranks"] = reranks_per_query(bundle, planner, length)
        times: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for i in range(args.queries):  # query by query, the two sides in alternation
                for side in sides:
                    q = sides[side][2][i]
                    tick = time.perf_counter()
                    searches[side](q)
                    times[side].append((time.perf_counter() - tick) * 1e3)
        for side in sides:
            entry[f"{side}_p50_ms"] = round(float(np.median(times[side])), 4)
        entry["ratio"] = round(entry["large_p50_ms"] / entry["small_p50_ms"], 3)
        result["granularities"][granularity.value] = entry
        print(granularity.value, entry, flush=True)
    return publish(result, args.json)


if __name__ == "__main__":
    main()
