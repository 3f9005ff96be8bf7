"""The first text queries of a freshly started `strata serve`: the encoder's lazy set-up (its
first call on a thread) against the calls after it, and what the server's warm-up of its first
lane at start (service/engine/compute_threads.py `warm_lane`) leaves of it.

Each round starts `strata serve` (its default workers, one a core; `--workers N` to choose) on a
small synthetic bundle whose manifest names MiniLM (benchmarks/service/load.py `build_gallery`),
sends TEXTS one after another over one gRPC channel (one connection, so one worker; each text
once: every call embeds, none is a cache hit), and times each call; then stops the server.
`--compare CHECKOUT` starts the server from another checkout (e.g. the commit before the
warm-up) in alternate rounds. Reports, per arm, the median over the rounds of the first call,
of the median of the others, and of their difference.

    python -m benchmarks.service.first_text [--compare CHECKOUT] [--json runs/bench/first_text.json]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.harness import benchmark_parser, publish

TEXTS = (
    "a dog running on the beach",
    "two children playing football",
    "a red car parked on a street",
    "a woman riding a bicycle",
    "a man climbing a rock wall",
    "a cat sleeping on a sofa",
    "people walking in the snow",
    "a boy jumping into a lake",
)


def first_calls(bundles: Path, root: Path | None, workers: int | None) -> list[float]:
    """Milliseconds of each of TEXTS' searches against a server started for them."""
    from service.api.grpc.client import StrataClient
    from tests.servers import start_server

    extra = () if workers is None else ("--workers", str(workers))
    server, target, _ = start_server(bundles, extra=extra, root=root)
    try:
        with StrataClient(target) as client:
            client.index_info()  # the connection made: the first search times the search
            times = []
            for text in TEXTS:
                started = time.perf_counter()
                client.search(text, k=10)
                times.append((time.perf_counter() - started) * 1e3)
        return times
    finally:
        server.terminate()
        server.wait(timeout=60)


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=2000, help="rows of the served bundle")
    parser.add_argument("--compare", type=Path, help="another checkout, started alike")
    parser.add_argument("--workers", type=int, help="the servers' workers (default: serve's)")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/first_text.json"))
    args = parser.parse_args(argv)
    from benchmarks.service.load import build_gallery

    arms: dict[str, Path | None] = {"this checkout": None}
    if args.compare:
        arms[f"compare {args.compare}"] = args.compare.resolve()
    calls: dict[str, list[list[float]]] = {name: [] for name in arms}
    with tempfile.TemporaryDirectory(prefix="strata-first-text-") as folder:
        bundles = build_gallery(Path(folder), args.rows)
        for _ in range(args.rounds):
            for name, root in arms.items():
                calls[name].append(first_calls(bundles, root, args.workers))
    result: dict = {
        "rows": args.rows,
        "rounds": args.rounds,
        "texts": len(TEXTS),
        "workers": args.workers or "default",
        "arms": {},
    }
    for name, rounds in calls.items():
        first = [r[0] for r in rounds]
        later = [statistics.median(r[1:]) for r in rounds]
        result["arms"][name] = {
            "first_ms": round(statistics.median(first), 2),
            "later_ms": round(statistics.median(later), 2),
            "first_minus_later_ms": round(
                statistics.median(f - m for f, m in zip(first, later, strict=True)), 2
            ),
            "rounds_ms": [[round(t, 2) for t in r] for r in rounds],
        }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
