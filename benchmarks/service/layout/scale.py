"""A gallery of tens of millions of rows on one small machine: built and served with the store on
disk, in one run.

1. N × D spectrum rows (benchmarks/indexer/ann_tuning.spectrum_block: clustered, variance
   ∝ (j + 1)^−α) streamed into a float16 cache, 50,000 rows a shard (never the gallery in RAM),
   an identity GraSP-VL artifact and a random CEDAR (k = 32).
2. `strata index build --store-on-disk` in a child process: its wall time and peak RSS
   (getrusage of the child), and the bundle's bytes per row per part (indexer/format/footprint.py).
3. A fresh child process serves it cold: the version's files are first dropped from the page
   cache (posix_fadvise DONTNEED), then it opens and loads the bundle (every mapped file checked
   against the manifest), takes the funnels the build recorded (indexer/format/funnel_plans.py;
   the calibration a version without the record runs at load is timed after the queries) and
   answers a first query; then, per granularity, the plan the engine runs unfiltered, its p50
   over held-out gallery rows (one thread, interleaved rounds) and its reranks per query; the
   process's RSS after the queries, anonymous (what it must hold) and file-backed (mapped
   pages, the kernel's to drop).
4. recall@10 of each granularity against exact float32 search at its prefix over every row
   (the rows regenerated block by block), leave one out.

    python -m benchmarks.service.layout.scale --rows 10000000 --work runs/bench/scale
    python -m benchmarks.service.layout.scale --rows 1000000 --work runs/bench/scale-1m
    python -m benchmarks.service.layout.scale --rows 10000000 --serve-only   # steps 3-4 again
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from benchmarks.harness import benchmark_parser, publish, read_figures
from benchmarks.indexer.ann_tuning import SHARD, spectrum_block
from training.core.artifacts import TransformArtifact
from training.core.cache import CacheManifest, write_manifest, write_shard
from training.core.metrics import prefix_vectors
from training.synthetic import random_cedar_artifact

K, CLUSTERS, ALPHA, SEED = 10, 1024, 1.0, 0


def gallery_block(start: int, rows: int, dim: int) -> np.ndarray:
    """Rows [start, start + SHARD) as the cache holds them (float16-rounded), float32."""
    block = spectrum_block(start, rows, dim, CLUSTERS, ALPHA, SEED)
    return block.astype(np.float16).astype(np.float32)


def write_inputs(work: Path, rows: int, dim: int) -> None:
    """The cache streamed shard by shard, and the two artifacts (skipped when complete)."""
    if (work / "cache" / "manifest.json").is_file() and (work / "cedar").is_dir():
        return
    manifest = CacheManifest(encoder="synthetic", dim=dim, dtype="float16", modalities=["image"])
    for index, start in enumerate(range(0, rows, SHARD)):
        part = gallery_block(start, rows, dim)
        ids = pa.table({"id": [f"row-{i}" for i in range(start, start + len(part))]})
        manifest.shards.append(write_shard(work / "cache", index, {"image": part}, ids, "float16"))
        print(f"cache {start + len(part):,} / {rows:,}", end="\r", flush=True)
    manifest.complete = True
    write_manifest(work / "cache", manifest)
    TransformArtifact.identity(dim, method="grasp-vl").save(work / "grasp")
    random_cedar_artifact(dim, 32, gallery_block(0, rows, dim)[:5000]).save(work / "cedar")


def strata(*args: str) -> list[str]:
    return [sys.executable, "-c", "from service.cli import main; main()", *args]


def build(work: Path) -> dict:
    """`strata index build --store-on-disk` in a child: seconds, the child's peak RSS
    (getrusage), and the peaks of its anonymous and file-backed parts (/proc, once a second)."""
    started = time.perf_counter()
    child = subprocess.Popen(
        strata(
            "index",
            "build",
            "--cache",
            str(work / "cache"),
            "--grasp",
            str(work / "grasp"),
            "--cedar",
            str(work / "cedar"),
            "--out",
            str(work / "bundles"),
            "--store-on-disk",
            "--no-progress",
        )
    )
    peaks = {"RssAnon": 0.0, "RssFile": 0.0}
    while child.poll() is None:
        status = memory_status(Path(f"/proc/{child.pid}/status"))
        for name in peaks:
            peaks[name] = max(peaks[name], status.get(name, 0.0))
        time.sleep(1.0)
    if child.returncode != 0:
        raise SystemExit(f"scale: the build failed (exit {child.returncode})")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {
        "seconds": round(time.perf_counter() - started, 1),
        "peak_rss_gib": round(peak / 2**30, 2),
        "peak_rss_anon_gib": peaks["RssAnon"],
        "peak_rss_file_gib": peaks["RssFile"],
    }


def drop_page_cache(folder: Path) -> None:
    """Ask the kernel to drop the folder's files from the page cache (a cold start)."""
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def memory_status(status: Path = Path("/proc/self/status")) -> dict:
    """A process's RSS split, GiB (/proc/PID/status; this process's by default)."""
    fields: dict[str, float] = {}
    try:
        text = status.read_text()
    except OSError:  # the process has just ended
        return fields
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
            fields[name] = round(int(value.split()[0]) * 1024 / 2**30, 3)
    return fields


def held_out(rows: int, count: int) -> np.ndarray:
    return np.sort(np.random.default_rng(7).choice(rows, count, replace=False))


def held_out_rows(selves: np.ndarray, rows: int, dim: int) -> np.ndarray:
    """The held-out gallery rows themselves, regenerated from their blocks."""
    out = np.empty((len(selves), dim), dtype=np.float32)
    for start in np.unique(selves // SHARD * SHARD):
        at = (selves >= start) & (selves < start + SHARD)
        out[at] = gallery_block(int(start), rows, dim)[selves[at] - start]
    return out


def serve(bundles: Path, rows: int, queries: int, rounds: int, out: Path) -> None:
    """Step 3, in a fresh process (see the module docstring); writes its JSON to `out`."""
    import faiss

    from benchmarks.service.layout.memory import reranks_per_query, strata_search
    from indexer.format.bundle import Bundle
    from indexer.format.footprint import footprint
    from indexer.format.store_rerank import StoreRerank
    from indexer.format.tuning import drop_self

    faiss.omp_set_num_threads(1)
    bundle = Bundle.open(bundles)
    selves = held_out(rows, queries)  # the queries are made first: no part of the start
    raw_queries = held_out_rows(selves, rows, bundle.dim)
    drop_page_cache(bundle.path)
    started = time.perf_counter()
    bundle.load()
    loaded = time.perf_counter()
    from service.engine.plans import Planner

    planner = Planner(bundle)
    ready = time.perf_counter()
    rotated = bundle.rotate(raw_queries)
    shortest = min(bundle.prefix_lengths)
    first_search, _ = strata_search(bundle, planner, shortest)
    tick = time.perf_counter()
    first_search(rotated[0])
    first_ms = (time.perf_counter() - tick) * 1e3
    result: dict = {
        "load_seconds": round(loaded - started, 2),
        "calibration_seconds": round(ready - loaded, 2),  # plans read from the manifest
        "plans_recorded": planner.recorded,
        "first_query_ms": round(first_ms, 3),
        "ready_to_first_answer_seconds": round(time.perf_counter() - started, 2),
        "parts_bytes_per_row": {
            p.name: {"disk": round(p.disk / rows, 1), "resident": round(p.resident / rows, 1)}
            for p in footprint(bundle.manifest)
        },
        "plans": {},
    }
    found: dict = {}
    searches = {}
    for granularity, length in sorted(bundle.contract.items(), key=lambda g: g[1]):
        search, plan = strata_search(bundle, planner, length)
        searches[granularity.value] = search
        found[length] = drop_self(np.stack([search(q) for q in rotated]), selves, K).tolist()
        index = bundle.index(length)
        result["plans"][granularity.value] = {
            "prefix": length,
            "plan": plan,
            "search": bundle.manifest.prefix(length).search
            if isinstance(index, StoreRerank)
            else "",
            "reranks_per_query": reranks_per_query(bundle, planner, length),
        }
    times: dict[str, list[float]] = {name: [] for name in searches}
    names = list(searches)
    for round_ in range(rounds):  # interleaved: each round every granularity in turn, rotating
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            for q in rotated:
                tick = time.perf_counter()
                searches[name](q)
                times[name].append((time.perf_counter() - tick) * 1e3)
    for name, measured in times.items():
        result["plans"][name]["p50_ms"] = round(float(np.median(measured)), 4)
    result["memory_gib"] = memory_status()
    # what a replica would pay at start had the build not recorded the plans: the calibration
    # run at load, as on a version written before the record (after the timed part)
    from indexer.format.funnel_plans import FunnelConfig, calibrate_plans

    tick = time.perf_counter()
    calibrate_plans(bundle, FunnelConfig())
    result["calibration_at_load_seconds"] = round(time.perf_counter() - tick, 2)
    result["found"] = {str(n): f for n, f in found.items()}
    out.write_text(json.dumps(result))


def exact_truth(rows: int, dim: int, lengths: list[int], selves: np.ndarray) -> dict[int, list]:
    """Exact float32 top-(k + 1) at every prefix over every row, the rows regenerated block by
    block (the rotation is the identity), each query's own row then dropped."""
    from indexer.format.store.top_k import merge_top_k
    from indexer.format.tuning import drop_self

    queries = held_out_rows(selves, rows, dim)
    heads = {n: prefix_vectors(queries, n) for n in lengths}
    best = {
        n: (np.zeros((len(selves), 0), np.float32), np.zeros((len(selves), 0), np.int64))
        for n in lengths
    }
    for start in range(0, rows, SHARD):
        block = gallery_block(start, rows, dim)
        ids = np.arange(start, start + len(block), dtype=np.int64)
        for n in lengths:
            best[n] = merge_top_k(best[n], heads[n] @ prefix_vectors(block, n).T, ids, K + 1)
        print(f"truth {start + len(block):,} / {rows:,}", end="\r", flush=True)
    return {n: drop_self(best[n][1], selves, K) for n in lengths}


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("runs/bench/scale"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--serve-only",
        action="store_true",
        help="serve and score the bundle an earlier run built in --work (its build figures kept)",
    )
    parser.add_argument("--serve", type=Path, default=None, help=argparse_hidden())
    args = parser.parse_args(argv)
    if args.serve is not None:  # the child of step 3
        serve(args.work / "bundles", args.rows, args.queries, args.rounds, args.serve)
        return {}
    from training.core.metrics import neighbour_recall

    json_path = args.json or Path(f"runs/bench/scale-{args.rows}.json")
    result: dict = {"rows": args.rows, "dim": args.dim, "k": K}
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if args.serve_only:
        if not (args.work / "bundles").is_dir() or not json_path.is_file():
            raise SystemExit(
                f"scale: --serve-only needs a run's bundles in {args.work} and {json_path}"
            )
        earlier = read_figures(json_path)
        result["cache_seconds"], result["build"] = earlier["cache_seconds"], earlier["build"]
    else:
        write_inputs(args.work, args.rows, args.dim)
        result["cache_seconds"] = round(time.perf_counter() - started, 1)
        result["build"] = build(args.work)
    publish(result, json_path)
    served = args.work / "served.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.service.layout.scale",
            "--rows",
            str(args.rows),
            "--queries",
            str(args.queries),
            "--rounds",
            str(args.rounds),
            "--work",
            str(args.work),
            "--serve",
            str(served),
        ],
        check=True,
    )
    serving = json.loads(served.read_text())
    found = serving.pop("found")
    result["serve"] = serving
    lengths = [serving["plans"][g]["prefix"] for g in serving["plans"]]
    truth = exact_truth(args.rows, args.dim, lengths, held_out(args.rows, args.queries))
    for plan in serving["plans"].values():
        length = plan["prefix"]
        plan["recall_at_10"] = round(
            neighbour_recall(np.asarray(found[str(length)]), truth[length]), 4
        )
    result["seconds"] = round(time.perf_counter() - started, 1)
    return publish(result, json_path)


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
