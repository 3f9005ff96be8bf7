"""A zero-shot phrase's filter as a user meets it: through `strata serve`, over gRPC.

The bundle is filter_latency's (`--cache`, `--cedar`, `--grasp`, `--rows`: a captioned cache, N
rows tiled from it above its size; built once in `--work`). `strata serve --workers W` (default:
one per core, as the command's own default) is started as a user starts it. A worker reads its
open vocabulary's state from the version where the index build kept it
(indexer/vocabulary/stored_state.py: `kept_by_the_version`, the manifest's record, with the
build's seconds); otherwise it makes it when a phrase first asks for it
(service/engine/open_vocabulary.py): the moments, z and hub values at once, and past 131,072
rows the sketch on a background thread, phrases scanning until it is built. Reported, on the
one worker the client's connection reaches:

- seconds from the command's start to its listening line; PSS (`/proc/PID/smaps_rollup`) of
  the server's process tree then;
- the first zero-shot search on the bundle (`--first`, a phrase of its own: the state read or
  made, its rows found) and, where the worker builds its sketch, the seconds until it logs it
  built (null where the version keeps it); PSS then;
- then per phrase of `--phrases` (names the catalog lacks): the first filtered search (`require` the
  phrase, text "a photo", k = 10; the query's embedding already cached by an unfiltered warm-up
  search), then `--repeats` filtered and unfiltered searches, interleaved: p50 of each and the
  ratio. One client, one connection.

    python -m benchmarks.service.filters.zero_shot_served --cache runs/demo/cache-flickr8k-minilm \\
        --cedar runs/demo/cedar-flickr8k --grasp runs/demo/grasp-flickr8k \\
        --work runs/bench/fl-1m --rows 1000000
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from benchmarks.service.filters.filter_latency import word_bundle
from benchmarks.service.workers import START_S, Served
from indexer.format.bundle import Bundle
from service.api.grpc.client import StrataClient
from service.cli.serve_setup import worker_count
from service.results import SearchResult

BUILT = "open vocabulary: the sketch of"
QUERY = "a photo"


def search_ms(client: StrataClient, phrase: str | None) -> tuple[SearchResult, float]:
    """One search for QUERY (`require` the phrase, if any) and its wall time, ms."""
    started = time.perf_counter()
    found = client.search(QUERY, k=10, require=[phrase] if phrase else [])
    return found, (time.perf_counter() - started) * 1e3


def phrase_arms(client: StrataClient, phrase: str, repeats: int) -> dict:
    """A phrase's first filtered search, then `repeats` filtered and unfiltered, interleaved."""
    made, first = search_ms(client, phrase)
    arms: dict[str, list[float]] = {"require": [], "unfiltered": []}
    for _ in range(repeats):
        arms["require"].append(search_ms(client, phrase)[1])
        arms["unfiltered"].append(search_ms(client, None)[1])
    p50 = {arm: float(np.median(t)) for arm, t in arms.items()}
    return {
        "rows": made.filtered_rows,
        "made": [f.made for f in made.filter_concepts],
        "first_ms": round(first, 2),
        "p50_ms": {arm: round(v, 3) for arm, v in p50.items()},
        "require_ratio": round(p50["require"] / p50["unfiltered"], 3),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, default=Path("runs/demo/cache-flickr8k-minilm"))
    parser.add_argument("--cedar", type=Path, default=Path("runs/demo/cedar-flickr8k"))
    parser.add_argument("--grasp", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=Path("runs/bench/zero-shot-served"))
    parser.add_argument("--rows", type=int, default=0)
    parser.add_argument("--workers", type=int, default=worker_count(None, "faiss"))
    parser.add_argument("--first", default="zebra", help="the phrase that starts the state")
    parser.add_argument("--phrases", default="giraffe,fire hydrant,teddy bear,sink,broccoli")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/zero_shot_served.json"))
    args = parser.parse_args(argv)
    phrases = [p for p in args.phrases.split(",") if p]
    bundles = word_bundle(args.cache, args.cedar, args.work, args.rows, (), args.grasp)
    started = time.perf_counter()
    served = Served(bundles, args.workers)
    result: dict = {"workers": args.workers, "listening_s": round(time.perf_counter() - started, 1)}
    kept = result["kept_by_the_version"] = Bundle.open(bundles).manifest.open_vocabulary
    try:
        result["pss_mb_listening"] = round(served.pss_mb(), 1)
        with StrataClient(served.target, timeout=600) as client:
            client.search(QUERY, k=10)
            asked = time.perf_counter()
            result["first_zero_shot_ms"] = round(search_ms(client, args.first)[1], 1)
            result["sketch_built_s"] = None
            while kept is None and not served.said(BUILT):
                if time.perf_counter() - asked > START_S or served.process.poll() is not None:
                    raise RuntimeError(f"no sketch built: {''.join(served.log[-5:])}")
                time.sleep(0.2)
            if kept is None:
                result["sketch_built_s"] = round(time.perf_counter() - asked, 1)
            result["pss_mb_sketched"] = round(served.pss_mb(), 1)
            result["phrases"] = {p: phrase_arms(client, p, args.repeats) for p in phrases}
    finally:
        served.stop()
    return publish(result, args.json)


if __name__ == "__main__":
    main()
