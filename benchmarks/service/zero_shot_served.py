"""A zero-shot phrase's filter as a user meets it: through `strata serve`, over gRPC.

The bundle is filter_latency's (`--cache`, `--cedar`, `--grasp`, `--rows`: a captioned cache, N
rows tiled from it above its size; built once in `--work`). `strata serve --workers W` (default:
one per core, as the command's own default) is started as a user starts it; past 131,072 rows
each worker prepares the open vocabulary's state (moments, z, the sketch:
service/engine/open_vocabulary.py) on a background thread from its start. Reported:

- seconds from the command's start to its listening line, and to every worker's
  `open vocabulary … prepared` line;
- PSS (`/proc/PID/smaps_rollup`) of the server's process tree once prepared;
- per phrase of `--phrases` (names the catalog lacks): the first filtered search (`require` the
  phrase, text "a photo", k = 10; the query's embedding already cached by an unfiltered warm-up
  search), then `--repeats` filtered and unfiltered searches, interleaved: p50 of each and the
  ratio. One client, one connection.

    python -m benchmarks.service.zero_shot_served --cache runs/demo/cache-flickr8k-minilm \\
        --cedar runs/demo/cedar-flickr8k --grasp runs/demo/grasp-flickr8k \\
        --work runs/bench/fl-1m --rows 1000000
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from benchmarks.service.filter_latency import word_bundle
from benchmarks.service.workers import START_S, Served
from service.api.grpc.client import StrataClient
from service.results import SearchResult

PREPARED = "open vocabulary of"
QUERY = "a photo"


def search_ms(client: StrataClient, phrase: str | None) -> tuple[SearchResult, float]:
    """One search for QUERY (`require` the phrase, if any) and its wall time, ms."""
    started = time.perf_counter()
    found = client.search(QUERY, k=10, require=[phrase] if phrase else [])
    return found, (time.perf_counter() - started) * 1e3


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, default=Path("runs/demo/cache-flickr8k-minilm"))
    parser.add_argument("--cedar", type=Path, default=Path("runs/demo/cedar-flickr8k"))
    parser.add_argument("--grasp", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=Path("runs/bench/zero-shot-served"))
    parser.add_argument("--rows", type=int, default=0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--phrases", default="giraffe,fire hydrant,teddy bear,sink,broccoli")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/zero_shot_served.json"))
    args = parser.parse_args(argv)
    bundles = word_bundle(args.cache, args.cedar, args.work, args.rows, (), args.grasp)
    started = time.perf_counter()
    served = Served(bundles, args.workers)
    result: dict = {"workers": args.workers, "listening_s": time.perf_counter() - started}
    try:
        while sum(PREPARED in line for line in list(served.log)) < args.workers:
            if time.perf_counter() - started > START_S or served.process.poll() is not None:
                raise RuntimeError(f"no worker prepared: {''.join(served.log[-5:])}")
            time.sleep(0.2)
        result["prepared_s"] = round(time.perf_counter() - started, 1)
        result["listening_s"] = round(result["listening_s"], 1)
        result["pss_mb"] = round(served.pss_mb(), 1)
        result["phrases"] = {}
        with StrataClient(served.target, timeout=60) as client:
            client.search(QUERY, k=10)
            for phrase in [p for p in args.phrases.split(",") if p]:
                made, first = search_ms(client, phrase)
                arms: dict[str, list[float]] = {"require": [], "unfiltered": []}
                for _ in range(args.repeats):
                    arms["require"].append(search_ms(client, phrase)[1])
                    arms["unfiltered"].append(search_ms(client, None)[1])
                p50 = {arm: float(np.median(t)) for arm, t in arms.items()}
                result["phrases"][phrase] = {
                    "rows": made.filtered_rows,
                    "made": [f.made for f in made.filter_concepts],
                    "first_ms": round(first, 2),
                    "p50_ms": {arm: round(v, 3) for arm, v in p50.items()},
                    "require_ratio": round(p50["require"] / p50["unfiltered"], 3),
                }
    finally:
        served.stop()
    return publish(result, args.json)


if __name__ == "__main__":
    main()
