"""The funnel plan against a full-D Flat scan: recall@10, single-query latency ratio, gRPC QPS.

Three parts, each side by side with its baseline in this one process (interleaved: for every
query, the direct search, then each funnel, timed one after another; medians):

1. `bundle`: a real bundle (e.g. Flickr8k's 40,460 MiniLM captions, rotated by a GraSP-VL
   artifact). Queries are gallery rows held out leave-one-out (each searches for k + 1 and drops
   its own row, on both sides), drawn with a seed other than the engine's calibration. For each
   funnel (S, F) of a grid and the one the engine calibrated for "auto": recall@10 against exact
   full-D search, and the median latency of `funnel_search` over the bundle's own indexes as a
   ratio to the bare FAISS Flat scan at full D; plus the same ratio through `SearchEngine.search`
   (vector queries, plan funnel against plan direct).
2. `synthetic`: N × D rows (default 1,000,000 × 512) drawn with variance λ_j ∝ j^−α along the
   coordinates (α = 1 by default: MiniLM's PCA spectrum on Flickr8k falls as j^−0.9 over its
   first hundred axes), so that the leading coordinates carry the most variance, as a learned
   rotation orders them; unit rows; queries are fresh rows of the same distribution. FAISS Flat
   indexes at D, D/16 and D/8 held in RAM, the engine's `funnel_search` and `calibrate` on them.
   `spectrum-bundle`: the same rows written as a float16 cache and built into a real bundle by
   the indexer (identity GraSP-VL artifact, so the coordinates keep their order; every prefix
   Flat; random CEDAR), then measured as part 1 measures a bundle (queries: held-out gallery
   rows), and served for part 3.
3. `grpc`: a live server over the bundle of part 1 (or of `spectrum-bundle`) and a separate
   load process (the machinery of benchmarks/service/load.py); vector queries at full
   granularity, plan direct against the calibrated funnel, at each concurrency, in
   `--repeats` interleaved rounds: median QPS.

FAISS and torch run on one thread (`--threads`), as the latency figures say "one thread".

    python -m benchmarks.service.layout.funnel --bundle runs/bench/flickr-bundle
    python -m benchmarks.service.layout.funnel --bundle B --parts bundle,grpc --queries 100
    python -m benchmarks.service.layout.funnel --parts synthetic --rows 200000
    python -m benchmarks.service.layout.funnel --parts spectrum-bundle,grpc \\
        --json runs/bench/f1m.json
"""

from __future__ import annotations

import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa

from benchmarks.harness import benchmark_parser, interleaved, publish
from benchmarks.service.load import drive_load, set_threads
from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.format.bundle import Bundle
from indexer.format.funnel import ExactRows, calibrate, funnel_search
from service.api.background import BackgroundServer
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.results import SearchPlan, SearchQuery
from training.core.artifacts import TransformArtifact
from training.core.cache import CacheManifest, EmbeddingCache, write_manifest, write_shard
from training.core.granularity import Granularity
from training.core.metrics import neighbour_recall, prefix_vectors
from training.synthetic import random_cedar_artifact, spectrum_rows

K = 10
FACTORS = (10, 20, 50, 100)


def without_self(rows: np.ndarray, own: np.ndarray) -> np.ndarray:
    return np.stack([r[r != o][:K] for r, o in zip(rows, own, strict=True)])


def funnel_table(
    indexes: dict[int, faiss.Index],
    exact: ExactRows,
    rotated: np.ndarray,
    truth: np.ndarray,
    grid: list[tuple[int, int]],
    own: np.ndarray | None,
    queries: int,
    rounds: int,
) -> list[dict]:
    """Recall@10 and latency ratio to the full-D Flat scan of every (S, F) of `grid`."""
    full = exact.length
    direct_index = indexes[full]
    q_full = prefix_vectors(rotated, full)
    extra = 0 if own is None else 1
    rows_of: dict[tuple[int, int], np.ndarray] = {}
    for s, f in grid:
        _, found = funnel_search(indexes[s], s, exact, rotated, full, K + extra, f)
        rows_of[(s, f)] = found if own is None else without_self(found, own)
    arms: dict[str, Callable[[int], object]] = {
        "flat": lambda i: direct_index.search(q_full[i : i + 1], K)
    }
    for s, f in grid:
        arms[f"{s}x{f}"] = lambda i, s=s, f=f: funnel_search(
            indexes[s], s, exact, rotated[i : i + 1], full, K, f
        )
    medians = interleaved(arms, min(queries, len(rotated)), rounds)
    return [
        {
            "shortlist_prefix": s,
            "factor": f,
            "shortlist_rows": K * f,
            "recall_at_10": neighbour_recall(rows_of[(s, f)], truth),
            "latency_ms": 1000 * medians[f"{s}x{f}"],
            "flat_ms": 1000 * medians["flat"],
            "speedup_over_flat": medians["flat"] / medians[f"{s}x{f}"],
        }
        for s, f in grid
    ]


def bundle_part(path: Path, queries: int, rounds: int, seed: int) -> tuple[dict, SearchEngine]:
    """Part 1 (module docstring); also returns the engine, for part 3."""
    engine = SearchEngine(Bundle.open(path), None)
    bundle = engine.bundle
    full = bundle.dim
    cache = EmbeddingCache.open(Path(bundle.manifest.source["cache"]))
    own = np.sort(np.random.default_rng(seed).choice(bundle.rows, queries, replace=False))
    embeddings = np.asarray(cache.embeddings(bundle.manifest.modality)[own], dtype=np.float32)
    rotated = bundle.rotate(embeddings)
    _, exact_rows = bundle.index(full).search(prefix_vectors(rotated, full), K + 1)
    truth = without_self(exact_rows, own)
    planner = engine.scorer.planner
    choice = planner.choices.get(full)
    grid = [(s, f) for s in sorted(planner.indexes) if s < full // 2 for f in FACTORS]
    table = funnel_table(
        planner.indexes, planner.exact(full), rotated, truth, grid, own, queries, rounds
    )
    result: dict = {"rows": bundle.rows, "dim": full, "queries": queries, "grid": table}
    if choice is not None:
        result["calibrated"] = {
            "shortlist_prefix": choice.shortlist_prefix,
            "factor": choice.factor,
            "calibration_recall": choice.recall,
            "cost_share": choice.cost_share,
        } | next(
            {"recall_at_10": r["recall_at_10"], "speedup_over_flat": r["speedup_over_flat"]}
            for r in table
            if (r["shortlist_prefix"], r["factor"]) == (choice.shortlist_prefix, choice.factor)
        )
        plan = SearchPlan("funnel", choice.shortlist_prefix, choice.factor)

        def through_engine(kind: SearchPlan | str) -> Callable[[int], object]:
            return lambda i: engine.search(
                SearchQuery.of(vector=embeddings[i], granularity="full", k=K, plan=kind)
            )

        medians = interleaved(
            {"direct": through_engine("direct"), "funnel": through_engine(plan)},
            queries,
            rounds,
        )
        result["engine"] = {
            "direct_ms": 1000 * medians["direct"],
            "funnel_ms": 1000 * medians["funnel"],
            "speedup": medians["direct"] / medians["funnel"],
        }
    return result, engine


def spectrum_bundle(work: Path, rows: int, dim: int, alpha: float, shard: int = 50_000) -> Path:
    """BUNDLES folder of `rows` spectrum rows (float16 cache, identity GraSP-VL, every prefix
    Flat, random CEDAR with k = 32)."""
    cache = work / "cache"
    manifest = CacheManifest(encoder="synthetic", dim=dim, dtype="float16", modalities=["text"])
    for index, start in enumerate(range(0, rows, shard)):
        x = spectrum_rows(min(shard, rows - start), dim, alpha, seed=10 + index)
        ids = pa.table({"id": [f"row-{i}" for i in range(start, start + len(x))]})
        manifest.shards.append(write_shard(cache, index, {"text": x}, ids, "float16"))
    manifest.complete = True
    write_manifest(cache, manifest)
    TransformArtifact.identity(dim, method="grasp-vl").save(work / "grasp")
    sample = spectrum_rows(5000, dim, alpha, seed=10)
    random_cedar_artifact(dim, 32, sample).save(work / "cedar")
    build_bundle(
        BuildConfig(
            cache=cache,
            grasp=work / "grasp",
            cedar=work / "cedar",
            out=work / "bundles",
            index_types=tuple(f"{g.value}=flat" for g in Granularity),
            progress=False,
        )
    )
    return work / "bundles"


def synthetic_part(rows: int, dim: int, alpha: float, queries: int, rounds: int) -> dict:
    """Part 2 (module docstring)."""
    gallery = spectrum_rows(rows, dim, alpha, seed=0)
    query_rows = spectrum_rows(queries, dim, alpha, seed=1)
    indexes: dict[int, faiss.Index] = {}
    for length in (dim // 16, dim // 8, dim):
        index = faiss.IndexFlatIP(length)
        for start in range(0, rows, 65_536):
            index.add(prefix_vectors(gallery[start : start + 65_536], length))
        indexes[length] = index
    del gallery
    exact = ExactRows.of(indexes[dim], dim)
    _, truth = indexes[dim].search(query_rows, K)
    grid = [(s, f) for s in (dim // 16, dim // 8) for f in FACTORS]
    table = funnel_table(indexes, exact, query_rows, truth, grid, None, queries, rounds)
    started = time.perf_counter()
    choice = calibrate(indexes, exact, dim, K)
    seconds = time.perf_counter() - started
    calibrated = None
    if choice is not None:
        calibrated = {
            "shortlist_prefix": choice.shortlist_prefix,
            "factor": choice.factor,
            "calibration_recall": choice.recall,
            "calibration_seconds": seconds,
        }
    return {
        "rows": rows,
        "dim": dim,
        "alpha": alpha,
        "queries": queries,
        "grid": table,
        "calibrated": calibrated,
    }


def grpc_part(
    engine: SearchEngine, levels: list[int], queries: int, repeats: int, seed: int
) -> dict:
    """Part 3 (module docstring): median QPS of plan direct and the calibrated funnel."""
    from service._generated.strata.v1 import search_pb2 as pb

    full = engine.bundle.dim
    choice = engine.scorer.planner.choices.get(full)
    if choice is None:
        return {"skipped": "no funnel calibrated at the full prefix of this bundle"}
    rows = np.random.default_rng(seed).choice(engine.bundle.rows, 64, replace=False)
    cache = EmbeddingCache.open(Path(engine.bundle.manifest.source["cache"]))
    vectors = np.asarray(cache.embeddings(engine.bundle.manifest.modality)[np.sort(rows)])
    plans = {
        "direct": pb.SearchPlan(kind=pb.PLAN_KIND_DIRECT),
        "funnel": pb.SearchPlan(
            kind=pb.PLAN_KIND_FUNNEL,
            shortlist_prefix=choice.shortlist_prefix,
            factor=choice.factor,
        ),
    }
    requests = {
        name: [
            pb.SearchRequest(
                query=pb.Query(vector=pb.FloatVector(values=v.astype(float).tolist())),
                granularity=pb.GRANULARITY_FULL,
                top_k=K,
                plan=plan,
            ).SerializeToString()
            for v in vectors
        ]
        for name, plan in plans.items()
    }
    qps: dict[str, list[float]] = {f"{c} {n}": [] for c in levels for n in plans}
    spawn = multiprocessing.get_context("spawn")
    with (
        BackgroundServer(engine, ServerConfig(port=0)) as server,
        ProcessPoolExecutor(max_workers=1, mp_context=spawn) as load,
    ):
        for _ in range(repeats):
            for c in levels:
                for name in plans:
                    n = max(queries, 4 * c)
                    latencies, elapsed, others, _ = load.submit(
                        drive_load, server.target, c, n, 20.0, requests[name]
                    ).result()
                    if others:
                        raise RuntimeError(f"{name} at concurrency {c}: {list(others)}")
                    qps[f"{c} {name}"].append(len(latencies) / elapsed)
    median = {key: statistics.median(v) for key, v in qps.items()}
    return {
        "plan_funnel": f"{choice.shortlist_prefix}x{choice.factor}",
        "repeats": repeats,
        "median_qps": median,
        "qps_ratio_funnel_over_direct": {
            str(c): median[f"{c} funnel"] / median[f"{c} direct"] for c in levels
        },
    }


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--bundle", type=Path, help="bundle directory of parts 1 and 3")
    parser.add_argument("--parts", default="bundle,synthetic,grpc")
    parser.add_argument("--queries", type=int, default=200, help="queries of parts 1 and 2")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved latency rounds")
    parser.add_argument("--rows", type=int, default=1_000_000, help="synthetic rows")
    parser.add_argument("--dim", type=int, default=512, help="synthetic dimension")
    parser.add_argument("--alpha", type=float, default=1.0, help="synthetic spectrum λ_j ∝ j^−α")
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--grpc-queries", type=int, default=512, help="searches per gRPC arm")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the gRPC arms")
    parser.add_argument("--threads", type=int, default=1, help="FAISS/torch threads")
    parser.add_argument("--seed", type=int, default=1, help="held-out query rows (not 0)")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/funnel.json"))
    args = parser.parse_args(argv)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if parts & {"bundle", "grpc"} and args.bundle is None and "spectrum-bundle" not in parts:
        parser.error("the bundle and grpc parts need --bundle (or the spectrum-bundle part)")
    set_threads(args.threads)
    result: dict = {"benchmark": "funnel", "k": K, "threads": args.threads}
    engine = None
    work = tempfile.TemporaryDirectory(prefix="strata-funnel-")
    if "spectrum-bundle" in parts:
        started = time.perf_counter()
        built = spectrum_bundle(Path(work.name), args.rows, args.dim, args.alpha)
        seconds = time.perf_counter() - started
        result["spectrum_bundle"], engine = bundle_part(built, args.queries, args.rounds, args.seed)
        result["spectrum_bundle"] |= {"alpha": args.alpha, "build_seconds": seconds}
    elif parts & {"bundle", "grpc"}:
        result["bundle"], engine = bundle_part(args.bundle, args.queries, args.rounds, args.seed)
        result["bundle"]["path"] = str(args.bundle)
    if "synthetic" in parts:
        result["synthetic"] = synthetic_part(
            args.rows, args.dim, args.alpha, args.queries, args.rounds
        )
    if "grpc" in parts:
        assert engine is not None
        levels = [int(c) for c in args.concurrency.split(",")]
        result["grpc"] = grpc_part(engine, levels, args.grpc_queries, args.repeats, args.seed)
    if "bundle" not in parts:
        result.pop("bundle", None)
    work.cleanup()
    return publish(result, args.json)


if __name__ == "__main__":
    main()
