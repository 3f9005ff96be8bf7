"""The engine's time per call, one checkout against another: each arm's checkout times its calls
on its own bundle, over the same seeded test rows of one captioned cache, the arms interleaved
round by round so that the machine's drift falls on each alike.

An arm is `NAME=ROOT:BUNDLES`: the checkout whose code runs (`ROOT`, put first on the path of a
fresh process) and the bundle directory it serves (built by that checkout, or one bundle for
both where the change leaves the format alone). `--call` picks what is timed, after 20 warm-up
rows:

    explain   Explain with the row's own caption as the query (as benchmarks.service.explanations
              calls it);
    search    Search with the row's cached embedding (`--modality`) as a vector query (no
              encoder), once at every granularity (plan auto) and once a requested funnel
              at full: the plans, the batching and the hits' shaping, per call;
    explained the same vector queries with `explain` (each hit's concepts read back from
              the postings, the concepts shared), at object and at caption.

Reported: each arm's mean ms per call in every round, its median, and each later arm's paired
ratio to the first, round by round.

    python -m benchmarks.service.checkout_time --call search --cache runs/demo/cache-compositional \
        --arm before=../before:runs/demo/bundles-compositional \
        --arm after=.:runs/demo/bundles-compositional
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
from service.results import SearchPlan, SearchQuery
from training.cedar.data import load_split_rows
call, bundles, cache, modality = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
rows, seed, warm = map(int, sys.argv[5:8])
engine = SearchEngine.open(bundles)
data = load_split_rows(cache, modality)
index = data.rows("test")
texts = data.texts(index)
rng = np.random.default_rng(seed)
picked = np.sort(rng.choice(len(index), min(rows, len(index)), replace=False))
KINDS = [dict(granularity=g) for g in ("object", "attribute", "relation", "caption", "full")]
KINDS.append(dict(granularity="full", plan=SearchPlan("funnel")))
if call == "explained":
    KINDS = [dict(granularity=g, explain=True) for g in ("object", "caption")]
def calls(i):
    if call == "explain":
        engine.explain(SearchQuery(text=texts[i]), row=int(index[i]))
        return 1
    vector = data.embeddings[index[i]]
    for kind in KINDS:
        engine.search(SearchQuery.of(vector=vector, k=10, **kind))
    return len(KINDS)
for i in picked[:warm]:
    calls(i)
started, made = time.perf_counter(), 0
for i in picked:
    made += calls(i)
print(1000 * (time.perf_counter() - started) / made)
"""
CALLS = ("explain", "search", "explained")


def arm(text: str) -> tuple[str, Path, Path]:
    """(name, checkout root, bundles) of `NAME=ROOT:BUNDLES`."""
    name, _, rest = text.partition("=")
    root, _, bundles = rest.partition(":")
    if not (name and root and bundles):
        raise InputError(f"--arm {text!r}: expected NAME=ROOT:BUNDLES")
    return name, Path(root).resolve(), Path(bundles).resolve()


def call_ms(
    call: str, root: Path, bundles: Path, cache: Path, modality: str, rows: int, seed: int
) -> float:
    """Mean ms per call in a fresh process running checkout `root`."""
    env = {**os.environ, "PYTHONPATH": str(root), "STRATA_DEVICE": "cpu"}
    where = [str(bundles), str(cache), modality, str(rows), str(seed)]
    command = [sys.executable, "-c", TIMED, call, *where]
    done = subprocess.run(
        [*command, str(WARM_UP)], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise InputError(f"{root}: {call} failed: {done.stderr.strip().splitlines()[-1:]}")
    return float(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--call", choices=CALLS, default="explain")
    parser.add_argument("--cache", type=Path, required=True, help="the gallery's captioned cache")
    parser.add_argument("--modality", default="text", help="the cache's embeddings a search sends")
    parser.add_argument("--arm", action="append", type=arm, required=True)
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/checkout_time.json"))
    args = parser.parse_args(argv)
    cache = args.cache.resolve()
    times: dict[str, list[float]] = {name: [] for name, _, _ in args.arm}
    for round_ in range(args.rounds):
        for name, root, bundles in args.arm:
            ms = call_ms(args.call, root, bundles, cache, args.modality, args.rows, args.seed)
            times[name].append(ms)
            print(f"round {round_ + 1} {name}: {times[name][-1]:.2f} ms", flush=True)
    first = args.arm[0][0]
    result = {
        "call": args.call,
        "cache": str(args.cache),
        "modality": args.modality,
        "rows": args.rows,
        "rounds": args.rounds,
        "arms": {name: {"root": str(root), "bundles": str(b)} for name, root, b in args.arm},
        "ms_per_call": times,
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
