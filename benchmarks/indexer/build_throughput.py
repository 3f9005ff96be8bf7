"""Index-build overhead, prefix search latency, and the recall of approximate prefix indexes.

1. Writes N×D clustered synthetic embeddings (default 1,000,000 × 512, float16) into a cache,
   shard by shard, and makes a random GraSP-VL artifact and a CEDAR artifact (random rotation,
   catalog named from a random vocabulary).
2. Build arm: `build_bundle` with five Flat prefix indexes + postings + ids + checksums +
   verification + publish. Bare arm: the same reading, the one GraSP matmul per shard (in the
   same 8,192-row blocks as the build), the prefix renormalisation and a FAISS IndexFlatIP
   `add` per prefix — nothing else (no postings, no
   files, no checksums). Each arm runs in its own process, with the same environment and FAISS
   thread setting (each reports its `faiss_threads`), so each reports its own peak RSS (VmHWM,
   else `ru_maxrss`; `baseline_rss` is what the imports alone take) and CPU seconds (user +
   system, all threads). Reported: build seconds, the ratio build / bare, rows/s, bundle size.
3. Single-query latency on the bundle's Flat indexes at D/16 and D (one query per call, median
   over --queries), and their ratio (goal ≥ 12: the prefix scans 16× fewer bytes).
4. HNSW (`hnsw` rule) and IVF-PQ (`ivfpq-refine`, and `ivfpq-ondisk` without rerank) built over
   one prefix (--ann-prefix, default D/4) with the indexer's own writers; recall@10 against the
   bundle's exact Flat search at that prefix, build seconds, and median single-query latency.

    python -m benchmarks.indexer.build_throughput                  # the full size
    python -m benchmarks.indexer.build_throughput --rows 50000     # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

from benchmarks.harness import publish
from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.build.sampling import Reservoir
from indexer.format.bundle import Bundle
from indexer.format.index_plan import parse_index_types, plan_indexes
from indexer.format.prefix_index import read_prefix_index
from indexer.format.prefix_writers import open_writer, train_index
from indexer.format.prefixes import ROW_BLOCK, rotate_blocks, rotate_rows
from indexer.format.served_index import apply_search_parameters, default_search_parameters
from indexer.verify.sample import read_cache_rows
from training.core.artifacts import TransformArtifact
from training.core.cache import EmbeddingCache
from training.core.metrics import neighbour_recall, prefix_vectors
from training.synthetic import (
    cluster_centres,
    clustered_rows,
    random_cedar_artifact,
    random_grasp_artifact,
    write_synthetic_cache,
)

REPO = Path(__file__).resolve().parents[2]


def cpu_seconds() -> float:
    """User + system CPU seconds this process has used (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_bytes() -> int:
    """This process's peak resident memory: VmHWM where Linux has it (ru_maxrss would also count
    the parent's memory at the fork before exec), else ru_maxrss."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes, Linux KiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


# --- arms, each run in a child process ------------------------------------------------------


def arm_baseline(_: argparse.Namespace) -> dict:
    return {"peak_rss_bytes": peak_rss_bytes()}


def arm_build(args: argparse.Namespace) -> dict:
    work = Path(args.work)
    types = tuple(f"{n}=Flat" for n in random_grasp_artifact(args.dim).contract.values())
    started, cpu = time.perf_counter(), cpu_seconds()
    summary = build_bundle(
        BuildConfig(
            cache=work / "cache",
            grasp=work / "grasp",
            cedar=work / "cedar",
            out=work / "bundles",
            index_types=types,
            progress=False,
            keep=1,
        )
    )
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds() - cpu,
        "faiss_threads": faiss.omp_get_max_threads(),
        "rows_per_s": summary.rows / seconds,
        "bundle_bytes": summary.bytes_on_disk,
        "files": summary.files,
        "peak_rss_bytes": peak_rss_bytes(),
    }


def arm_bare(args: argparse.Namespace) -> dict:
    work = Path(args.work)
    cache = EmbeddingCache.open(work / "cache")
    grasp = TransformArtifact.load(work / "grasp")
    lengths = list(grasp.contract.values())
    started, cpu = time.perf_counter(), cpu_seconds()
    indexes = {n: faiss.IndexFlatIP(n) for n in lengths}
    for data in cache.iter_shards():
        # blocked like the build (indexer/format/prefixes.py), so neither arm pays for paging in
        # whole-shard temporaries that the other avoids
        z = rotate_blocks(data.embeddings[cache.modalities[0]], grasp)
        for start in range(0, len(z), ROW_BLOCK):
            block = z[start : start + ROW_BLOCK]
            for n in lengths:
                indexes[n].add(prefix_vectors(block, n))
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds() - cpu,
        "faiss_threads": faiss.omp_get_max_threads(),
        "rows_per_s": cache.rows / seconds,
        "peak_rss_bytes": peak_rss_bytes(),
    }


ARMS = {"baseline": arm_baseline, "build": arm_build, "bare": arm_bare}


def run_arm(name: str, args: argparse.Namespace) -> dict:
    command = [
        sys.executable,
        "-m",
        "benchmarks.indexer.build_throughput",
        "--arm",
        name,
        "--work",
        str(args.work),
        "--dim",
        str(args.dim),
    ]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"arm {name} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- in this process ------------------------------------------------------------------------


def make_inputs(args: argparse.Namespace, work: Path) -> float:
    started = time.perf_counter()
    write_synthetic_cache(
        work / "cache",
        args.rows,
        args.dim,
        shard_rows=args.shard_rows,
        dtype="float16",
        clusters=args.clusters,
        seed=args.seed,
    )
    random_grasp_artifact(args.dim, args.seed).save(work / "grasp")
    sample, _ = clustered_rows(cluster_centres(args.clusters, args.dim, args.seed), 2000, 99)
    random_cedar_artifact(args.dim, args.k, sample, seed=args.seed + 1).save(work / "cedar")
    return time.perf_counter() - started


def single_query_ms(search, queries: np.ndarray, warmup: int = 5) -> float:
    """Median milliseconds of one search call per query."""
    for q in queries[:warmup]:
        search(q[None])
    times = []
    for q in queries:
        started = time.perf_counter()
        search(q[None])
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def latency(bundle: Bundle, rotated: np.ndarray) -> dict:
    short, full = bundle.prefix_lengths[0], bundle.prefix_lengths[-1]
    ms = {
        n: single_query_ms(lambda q, n=n: bundle.search_prefix(n, q, 10), rotated)
        for n in (short, full)
    }
    return {
        "prefixes": [short, full],
        "median_ms": {str(n): v for n, v in ms.items()},
        "ratio_full_over_short": ms[full] / ms[short],
        "goal": 12,
    }


def ann_recall(
    args: argparse.Namespace, work: Path, bundle: Bundle, rotated: np.ndarray, threads: int
) -> dict:
    """Each approximate kind built over one prefix with the indexer's writers, vs exact Flat."""
    cache = EmbeddingCache.open(work / "cache")
    grasp = TransformArtifact.load(work / "grasp")
    length = args.ann_prefix or args.dim // 4
    _, exact = bundle.search_prefix(length, rotated, 10)
    results = {}
    for kind in args.ann:
        overrides = parse_index_types([f"{length}={kind}"], grasp.contract)
        plan = next(
            p
            for p in plan_indexes(cache.rows, grasp.contract, 2**40, overrides)
            if p.length == length
        )
        folder = Path(tempfile.mkdtemp(prefix=f"ann-{kind}-", dir=work))
        started = time.perf_counter()
        trained = None
        if plan.needs_training:
            reservoir = Reservoir(plan.training_rows(cache.rows), length, args.seed)
            for data in cache.iter_shards():
                reservoir.add(rotate_rows(data.embeddings[cache.modalities[0]], grasp)[:, :length])
                if reservoir.seen >= 4 * reservoir.size:
                    break
            trained = train_index(plan, prefix_vectors(reservoir.sample(), length))
        writer = open_writer(plan, folder, cache.rows, folder, trained)
        for data in cache.iter_shards():
            z = rotate_rows(data.embeddings[cache.modalities[0]], grasp)
            writer.add(prefix_vectors(z, length))
        writer.close()
        seconds = time.perf_counter() - started
        index = read_prefix_index(folder / plan.file, plan.factory, plan.ondisk)
        apply_search_parameters(index, default_search_parameters(plan.factory, length))
        queries = prefix_vectors(rotated, length)
        _, found = index.search(queries, 10)
        build_threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(threads)
        median_ms = single_query_ms(lambda q, index=index: index.search(q, 10), queries)
        faiss.omp_set_num_threads(build_threads)
        results[kind] = {
            "factory": plan.factory,
            "ondisk": plan.ondisk,
            "search": default_search_parameters(plan.factory, length),
            "build_seconds": seconds,
            "recall_at_10": neighbour_recall(found, exact),
            "median_ms": median_ms,
        }
        del index
        shutil.rmtree(folder)
    return {"prefix": length, "kinds": results}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--shard-rows", type=int, default=50_000)
    parser.add_argument("--clusters", type=int, default=1024)
    parser.add_argument("--k", type=int, default=32, help="CEDAR's active concepts per row")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--ann",
        default="hnsw,ivfpq-refine,ivfpq-ondisk",
        help="approximate kinds to score (rule kinds or factories)",
    )
    parser.add_argument("--ann-prefix", type=int, default=None, help="default D/4")
    parser.add_argument(
        "--latency-threads",
        type=int,
        default=1,
        help="OpenMP threads while timing single queries (a server runs one query per thread)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=None, help="default: a temporary folder")
    parser.add_argument("--keep-data", action="store_true", help="keep the cache and bundle")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/index_build.json"))
    parser.add_argument("--arm", choices=sorted(ARMS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.arm:  # a child process: one arm, its figures as a JSON line
        print(json.dumps(ARMS[args.arm](args)))
        return {}
    args.ann = [kind for kind in args.ann.split(",") if kind]

    work = args.work or Path(tempfile.mkdtemp(prefix="strata-index-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    args.work = work
    try:
        print(f"writing {args.rows} × {args.dim} rows into {work} ...", file=sys.stderr)
        inputs_seconds = make_inputs(args, work)
        print("bare arm ...", file=sys.stderr)
        bare = run_arm("bare", args)
        print("build arm ...", file=sys.stderr)
        build = run_arm("build", args)
        baseline = run_arm("baseline", args)
        bundle = Bundle.open(work / "bundles").load()
        rng = np.random.default_rng(args.seed)
        rows = np.sort(rng.choice(args.rows, min(args.queries, args.rows), replace=False))
        cache = EmbeddingCache.open(work / "cache")
        rotated = bundle.rotate(read_cache_rows(cache, cache.modalities[0], rows)[0])
        print("latency and recall ...", file=sys.stderr)
        build_threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(args.latency_threads)
        timed_latency = latency(bundle, rotated)
        faiss.omp_set_num_threads(build_threads)
        result = {
            "benchmark": "index_build",
            "rows": args.rows,
            "dim": args.dim,
            "shard_rows": args.shard_rows,
            "dtype": "float16",
            "k": args.k,
            "faiss": faiss.__version__,
            "omp_threads": build_threads,
            "latency_omp_threads": args.latency_threads,
            "inputs_seconds": inputs_seconds,
            "build": build,
            "bare": bare,
            "build_over_bare": build["seconds"] / bare["seconds"],
            "baseline_rss_bytes": baseline["peak_rss_bytes"],
            "latency": timed_latency,
            "ann": ann_recall(args, work, bundle, rotated, args.latency_threads),
        }
    finally:
        if not args.keep_data:
            shutil.rmtree(work, ignore_errors=True)
    return publish(result, args.json)


if __name__ == "__main__":
    main()
