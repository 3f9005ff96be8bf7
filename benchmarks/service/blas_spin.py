"""An engine's thread settings against its searches: BLAS's spinning threads.

A text query is embedded (torch) and then searched (FAISS, numpy's BLAS, torch's integer
product for a direct scan of the int8 store); a funnel's shortlist is such a scan. OpenBLAS keeps
its threads spinning for a while after each call, so on a machine with few cores the next
computation that wants every core (the encoder, the integer scan) can find them taken. Each arm
runs in a fresh process (thread settings are process-wide), opens the bundle with its encoder
(`SearchEngine.open`, as `strata serve` does and as a Python user does), then times `--queries`
searches, k = 10; the first (of each granularity) is dropped. `--kind text`: distinct texts, each
embedded (no query cache), AUTO granularity; `--kind vector`: seeded random unit vectors at each
granularity, plan auto. Arms, alternated round by round (`--rounds`):

- `defaults`: numpy's BLAS raised back to every core after the engine opened (every library on
  every core: a server, or an engine used in-process, before the engine limited BLAS itself);
- `served`: the engine as it opens (`SearchEngine` applies `limit_blas` once a process, as
  `strata serve` does: numpy's BLAS on one thread, FAISS and torch on every core:
  service/engine/compute_threads.py);
- `one thread`: FAISS, torch and BLAS on one thread each (a worker of `--workers` = cores).

Prints and writes p50, p90, max and the count past 50 ms per arm and search kind (every round's
times pooled).

    python -m benchmarks.service.blas_spin --bundles runs/demo/bundles-flickr8k
    python -m benchmarks.service.blas_spin --kind vector --json runs/bench/blas_spin-vector.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import benchmark_parser, publish

ARMS = ("defaults", "served", "one thread")
SLOW_MS = 50.0


GRANULARITIES = ("object", "attribute", "relation", "caption", "full")


def arm_times(bundles: Path, arm: str, queries: int, kind: str) -> dict[str, list[float]]:
    """One arm in this process: each search kind's wall times, ms (the first dropped)."""
    from threadpoolctl import threadpool_limits

    from service.engine.compute_threads import limit_threads
    from service.engine.search import SearchEngine
    from service.results import SearchQuery

    if arm == "one thread":
        limit_threads(1)
    engine = SearchEngine.open(bundles, device="cpu", verify=False)
    if arm == "defaults":
        threadpool_limits(limits=os.cpu_count() or 1, user_api="blas")
    if kind == "text":
        searches = {
            "text (auto)": [
                SearchQuery.of(f"a dog number {i} runs across the grass", k=10)
                for i in range(queries + 1)
            ]
        }
    else:
        vectors = np.random.default_rng(0).standard_normal((queries + 1, engine.bundle.dim))
        searches = {
            g: [SearchQuery.of(vector=v.astype(np.float32), k=10, granularity=g) for v in vectors]
            for g in GRANULARITIES
        }
    times: dict[str, list[float]] = {}
    for label, batch in searches.items():
        took = []
        for query in batch:
            started = time.perf_counter()
            engine.search(query)
            took.append((time.perf_counter() - started) * 1e3)
        times[label] = took[1:]
    return times


def summary(times: list[float]) -> dict[str, float]:
    values = np.asarray(times)
    return {
        "p50_ms": round(float(np.median(values)), 2),
        "p90_ms": round(float(np.percentile(values, 90)), 2),
        "max_ms": round(float(values.max()), 2),
        f"past_{SLOW_MS:g}_ms": int((values > SLOW_MS).sum()),
        "queries": len(values),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--bundles", type=Path, default=Path("runs/demo/bundles-flickr8k"))
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kind", choices=("text", "vector"), default="text")
    parser.add_argument("--arm", choices=ARMS, help="run one arm here (the parent's children)")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/blas_spin.json"))
    args = parser.parse_args(argv)
    if args.arm:  # the child: one arm, its times on stdout
        print(json.dumps(arm_times(args.bundles, args.arm, args.queries, args.kind)))
        return {}
    pooled: dict[str, dict[str, list[float]]] = {arm: {} for arm in ARMS}
    for _ in range(args.rounds):
        for arm in ARMS:
            child = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.service.blas_spin",
                    "--bundles",
                    str(args.bundles),
                    "--queries",
                    str(args.queries),
                    "--kind",
                    args.kind,
                    "--arm",
                    arm,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            for label, times in json.loads(child.stdout.strip().splitlines()[-1]).items():
                pooled[arm].setdefault(label, []).extend(times)
    result = {
        "benchmark": "blas_spin",
        "bundles": str(args.bundles),
        "kind": args.kind,
        "rounds": args.rounds,
        "arms": {
            arm: {label: summary(times) for label, times in kinds.items()}
            for arm, kinds in pooled.items()
        },
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
