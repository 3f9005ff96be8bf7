"""Start-up of the `strata` command: wall time of `strata --help` and of one `strata search`
against a running server, as ratios to `python -c "import grpc"` (the least a gRPC client
pays), median of 5 runs each, the three commands run one after another in every round.

    python -m benchmarks.service.startup [--compare /work/main] [--json runs/bench/startup.json]

The server is `strata serve` on a small synthetic bundle (MiniLM queries) built in a temporary
folder. `--compare CHECKOUT` also times the same two commands from another checkout (e.g. the
code before the commands loaded lazily), in the same rounds. Targets: --help ≤ 3×, search ≤ 5×.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import benchmark_parser, interleaved, publish

HELP_TARGET = 3.0
SEARCH_TARGET = 5.0


def command(argv: list[str], root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=root, check=True)


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=2000, help="rows of the served bundle")
    parser.add_argument("--compare", type=Path, help="another checkout, timed alike")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/startup.json"))
    args = parser.parse_args(argv)
    from benchmarks.service.load import build_gallery
    from tests.servers import start_server

    here = Path(__file__).resolve().parents[2]
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="strata-startup-") as folder:
        bundles = build_gallery(Path(folder), args.rows)
        server, target, _ = start_server(bundles)  # this checkout's server
        try:
            search = [python, "-m", "service", "search", "a dog on the beach", "--target", target]
            checkouts = {"": here, **({"compare ": args.compare.resolve()} if args.compare else {})}
            arms = {"import grpc": lambda _: command([python, "-c", "import grpc"], here)}
            for label, root in checkouts.items():
                arms[f"{label}strata --help"] = lambda _, r=root: command(
                    [python, "-m", "service", "--help"], r
                )
                arms[f"{label}strata search"] = lambda _, r=root: command(search, r)
            seconds = interleaved(arms, queries=1, rounds=args.rounds)
        finally:
            server.terminate()
            server.wait(timeout=60)
    base = seconds["import grpc"]
    ratios = {name: s / base for name, s in seconds.items()}
    result = {
        "benchmark": "startup",
        "rounds": args.rounds,
        "statistic": "median wall seconds of a subprocess",
        "bundle_rows": args.rows,
        "compare": str(args.compare) if args.compare else None,
        "seconds": seconds,
        "ratio_to_import_grpc": ratios,
        "targets": {"strata --help": HELP_TARGET, "strata search": SEARCH_TARGET},
        "help_within_target": ratios["strata --help"] <= HELP_TARGET,
        "search_within_target": ratios["strata search"] <= SEARCH_TARGET,
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
