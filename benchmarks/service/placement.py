"""A serving change measured as a user gets it — first, a worker's threads on one core while its
calls come one at a time (service/serving/thread_placement.py); then, singles batched only with
their own kind (service/serving/batch_order.py): `strata serve` with the default workers (one
per core; `--workers N` for N) from this checkout and from `--compare CHECKOUT` (a build
before the change, say), both started once on the request_path bundle (N × 512 synthetic rows,
benchmarks/service/request_path) and kept.

h2load (benchmarks/service/h2load.py) at each `--concurrency`, vector queries at object and AUTO
text queries (query-cache hits after the warm-up), each arm `--seconds` after a second's
warm-up; the two servers alternate arm by arm, which goes first reversing each round,
`--rounds` rounds. Per arm: each server's median QPS and median p50 (ms), and the median of the
rounds' QPS ratios this checkout / the other (`harness.paired_ratio`: within a round the two
run moments apart, so a drift of the machine's speed between rounds cancels). One caller at a
time is where gathering the threads should gain; at 8 and 32 callers, where the calls overlap
and the threads spread, the ratio should stay near 1. Batching singles by kind changes
nothing for the vector arms (one kind) and should gain for the text arms at 8 and 32 callers,
whose AUTO texts route to four granularities.

    python -m benchmarks.service.placement --compare CHECKOUT     # runs/bench/placement.json
    python -m benchmarks.service.placement --compare CHECKOUT --workers 1
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from benchmarks.harness import benchmark_parser, paired_ratio, publish
from benchmarks.service.h2load import h2load_arm
from benchmarks.service.request_path import gallery, query_vectors
from benchmarks.service.request_path.qps import qps_requests
from benchmarks.service.workers import H2LOAD_VECTORS, Served


def side_by_side(
    servers: dict[str, Served], levels: list[int], rounds: int, seconds: float
) -> tuple[dict[str, dict[str, list[float]]], dict[str, dict[str, list[float]]]]:
    """QPS and p50 (ms) per arm ("vector c=8"), per server, per round."""
    kinds = qps_requests(query_vectors(200))
    requests = {"vector": kinds["vector"][:H2LOAD_VECTORS], "text": kinds["text"]}
    runs: dict[str, dict[str, list[float]]] = {}
    p50s: dict[str, dict[str, list[float]]] = {}
    for round_ in range(rounds):
        order = list(servers.items())
        if round_ % 2:
            order.reverse()
        for c in levels:
            for kind, sent in requests.items():
                for name, served in order:
                    arm = h2load_arm(served.target, sent, c, seconds, served.handled)
                    runs.setdefault(f"{kind} c={c}", {}).setdefault(name, []).append(arm["qps"])
                    p50s.setdefault(f"{kind} c={c}", {}).setdefault(name, []).append(arm["p50_ms"])
    return runs, p50s


def summary(
    runs: dict[str, dict[str, list[float]]], p50s: dict[str, dict[str, list[float]]] | None = None
) -> dict[str, dict[str, float]]:
    """Each arm's median QPS (and p50, when given) per server, and the paired QPS ratio this /
    compare."""
    return {
        arm: {
            **{f"{name} qps": round(statistics.median(qps), 1) for name, qps in by.items()},
            **{
                f"{name} p50_ms": round(statistics.median(p50), 3)
                for name, p50 in (p50s or {}).get(arm, {}).items()
            },
            "this / compare": round(paired_ratio(by["this"], by["compare"]), 3),
        }
        for arm, by in runs.items()
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--compare", type=Path, required=True, help="another checkout")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=None, help="default: one per core")
    parser.add_argument("--seconds", type=float, default=5.0, help="each arm's window")
    parser.add_argument("--work", type=Path, default=Path("runs/bench/request-path"))
    parser.add_argument("--json", type=Path, default=Path("runs/bench/placement.json"))
    args = parser.parse_args(argv)
    bundles = gallery(args.work, args.rows).resolve()
    levels = [int(c) for c in args.concurrency.split(",")]
    servers = {
        "this": Served(bundles, args.workers),
        "compare": Served(bundles, args.workers, root=args.compare.resolve()),
    }
    try:
        runs, p50s = side_by_side(servers, levels, args.rounds, args.seconds)
    finally:
        for served in servers.values():
            served.stop()
    result = {
        "benchmark": "placement",
        "rows": args.rows,
        "compare": str(args.compare),
        "rounds": args.rounds,
        "workers": args.workers or "default",
        "arms": summary(runs, p50s),
        "qps_per_round": runs,
    }
    publish(result, args.json)
    return result


if __name__ == "__main__":
    main()
