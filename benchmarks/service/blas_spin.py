"""A served process's thread settings against the text path: BLAS's spinning threads.

A text query is embedded (torch) and then searched (FAISS, numpy's BLAS). OpenBLAS keeps its
threads spinning for a while after each call, so on a machine with few cores the next query's
encoder can find its cores taken. Each arm runs in a fresh process (thread settings are
process-wide), opens the bundle with its encoder (`SearchEngine.open`, as `strata serve` does),
then times `--queries` text searches of distinct texts (each embedded: no query cache), k = 10,
AUTO granularity; the first is dropped. Arms, alternated round by round (`--rounds`):

- `defaults`: no limit (every library takes every core: a server before this setting);
- `served`: `limit_blas()`, what `strata serve` sets in its process (numpy's BLAS on one
  thread, FAISS and torch on every core: service/engine/compute_threads.py);
- `one thread`: FAISS, torch and BLAS on one thread each (a worker of `--workers` = cores).

Prints and writes p50, p90, max and the count past 50 ms per arm (every round's times pooled).

    python -m benchmarks.service.blas_spin --bundles runs/demo/bundles-flickr8k
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import benchmark_parser, publish

ARMS = ("defaults", "served", "one thread")
SLOW_MS = 50.0


def arm_times(bundles: Path, arm: str, queries: int) -> list[float]:
    """One arm in this process: the text searches' wall times, ms (the first dropped)."""
    from service.engine.compute_threads import limit_blas, limit_threads
    from service.engine.search import SearchEngine
    from service.results import SearchQuery

    if arm == "served":
        limit_blas()
    elif arm == "one thread":
        limit_threads(1)
    engine = SearchEngine.open(bundles, device="cpu", verify=False)
    times = []
    for i in range(queries + 1):
        text = f"a dog number {i} runs across the grass"
        started = time.perf_counter()
        engine.search(SearchQuery.of(text, k=10))
        times.append((time.perf_counter() - started) * 1e3)
    return times[1:]


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
    parser.add_argument("--arm", choices=ARMS, help="run one arm here (the parent's children)")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/blas_spin.json"))
    args = parser.parse_args(argv)
    if args.arm:  # the child: one arm, its times on stdout
        print(json.dumps(arm_times(args.bundles, args.arm, args.queries)))
        return {}
    pooled: dict[str, list[float]] = {arm: [] for arm in ARMS}
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
                    "--arm",
                    arm,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            pooled[arm] += json.loads(child.stdout.strip().splitlines()[-1])
    result = {
        "benchmark": "blas_spin",
        "bundles": str(args.bundles),
        "rounds": args.rounds,
        "arms": {arm: summary(times) for arm, times in pooled.items()},
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
