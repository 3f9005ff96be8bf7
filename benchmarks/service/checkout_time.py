"""Explain's time per call, one checkout against another: each arm's checkout times Explain on its
own bundle, over the same seeded test rows of one captioned cache, the arms interleaved round by
round so that the machine's drift falls on each alike.

An arm is `NAME=ROOT:BUNDLES`: the checkout whose code runs (`ROOT`, put first on the path of a
fresh process) and the bundle directory it serves (built by that checkout). Each call is
Explain with the row's own caption as the query (as benchmarks.service.explanations calls it),
after 20 warm-up calls. Reported: each arm's mean ms per call in every round, its median, and
each later arm's paired ratio to the first, round by round.

    python -m benchmarks.service.explain_time --cache runs/comp20k-minilm \\
        --arm before=../before:runs/x/before-fc --arm after=.:runs/x/after-fc
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import benchmark_parser, publish
from training.core.errors import InputError

WARM_UP = 20
# what each arm's process runs: only names every checkout of the engine has
TIMED = """
import sys, time
from pathlib import Path
import numpy as np
from service.engine.search import SearchEngine
from service.results import SearchQuery
from training.cedar.data import load_split_rows
bundles, cache, rows, seed, warm = Path(sys.argv[1]), Path(sys.argv[2]), *map(int, sys.argv[3:6])
engine = SearchEngine.open(bundles)
data = load_split_rows(cache)
index = data.rows("test")
texts = data.texts(index)
rng = np.random.default_rng(seed)
picked = np.sort(rng.choice(len(index), min(rows, len(index)), replace=False))
for i in picked[:warm]:
    engine.explain(SearchQuery(text=texts[i]), row=int(index[i]))
started = time.perf_counter()
for i in picked:
    engine.explain(SearchQuery(text=texts[i]), row=int(index[i]))
print(1000 * (time.perf_counter() - started) / len(picked))
"""


def arm(text: str) -> tuple[str, Path, Path]:
    """(name, checkout root, bundles) of `NAME=ROOT:BUNDLES`."""
    name, _, rest = text.partition("=")
    root, _, bundles = rest.partition(":")
    if not (name and root and bundles):
        raise InputError(f"--arm {text!r}: expected NAME=ROOT:BUNDLES")
    return name, Path(root).resolve(), Path(bundles).resolve()


def explain_ms(root: Path, bundles: Path, cache: Path, rows: int, seed: int) -> float:
    """Mean ms per Explain call in a fresh process running checkout `root`."""
    env = {**os.environ, "PYTHONPATH": str(root), "STRATA_DEVICE": "cpu"}
    command = [sys.executable, "-c", TIMED, str(bundles), str(cache), str(rows), str(seed)]
    done = subprocess.run(
        [*command, str(WARM_UP)], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise InputError(f"{root}: Explain failed: {done.stderr.strip().splitlines()[-1:]}")
    return float(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, required=True, help="the gallery's captioned cache")
    parser.add_argument("--arm", action="append", type=arm, required=True)
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/explain_time.json"))
    args = parser.parse_args(argv)
    cache = args.cache.resolve()
    times: dict[str, list[float]] = {name: [] for name, _, _ in args.arm}
    for round_ in range(args.rounds):
        for name, root, bundles in args.arm:
            times[name].append(explain_ms(root, bundles, cache, args.rows, args.seed))
            print(f"round {round_ + 1} {name}: {times[name][-1]:.2f} ms", flush=True)
    first = args.arm[0][0]
    result = {
        "cache": str(args.cache),
        "rows": args.rows,
        "rounds": args.rounds,
        "arms": {name: {"root": str(root), "bundles": str(b)} for name, root, b in args.arm},
        "ms_per_explain": times,
        "median_ms": {name: statistics.median(v) for name, v in times.items()},
        "paired_ratio_to_first": {
            name: [round(a / b, 3) for a, b in zip(v, times[first], strict=True)]
            for name, v in times.items()
            if name != first
        },
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
