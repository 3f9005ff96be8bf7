"""Approximate indexes tuned at build time (indexer/format/tuning.py) at 1M rows, and Qdrant's HNSW.

1. N×D unit rows (default 1,000,000 × 512) with a realistic spectrum: clustered rows whose
   coordinate j has standard deviation ∝ (j + 1)^(−α/2) (α = 1: the power-law decay of the
   covariance eigenvalues of real text and image embeddings, as a rotation that orders variance
   leaves them), so neighbours have structure and most energy lies in few directions.
2. HNSW (`hnsw` rule: HNSW32,Flat) and IVF-PQ (`ivfpq-refine`: IVF{nlist},PQ{m}x8np,RFlat)
   built over the rows with the indexer's own writers (build seconds), then tuned to the recall
   target exactly as `strata index build` tunes them (tuning seconds, and their share of the
   build + tuning time).
3. On other held-out rows than the tuning's (leave one out: each query is a gallery row and its
   own row is dropped from both answers): recall@10 against exact search at the default
   setting (the one set at 50k rows) and at the tuned one; single-query latency (one thread,
   interleaved rounds — each search answers every query, the order rotating per round —,
   medians) of each against the exact Flat scan of the same rows.
4. Qdrant's embedded engine (qdrant-edge-py, HNSW m = 32, ef_construct = 40: FAISS's HNSW32
   defaults) over the same rows and queries: build seconds (upsert + optimize, all cores); the
   smallest hnsw_ef whose recall@10 reaches the target, timed side by side with Strata's tuned
   HNSW (which reaches it too) in the same interleaved rounds; and the ef ladder on up to
   Strata's recall, where Qdrant reaches it. Needs `pip install '.[bench]'`.
5. hnswlib (benchmarks/indexer/peers.py: HNSW M = 32, ef_construction = 40, inner product)
   over the same rows and queries, measured as Qdrant is: build seconds, its index size, the
   ef ladder, and its latency at the target beside Strata's tuned HNSW (`--no-hnswlib` skips).

    python -m benchmarks.indexer.ann_tuning                      # the full size
    python -m benchmarks.indexer.ann_tuning --rows 100000        # a quick check
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np

from benchmarks.harness import benchmark_parser, publish
from benchmarks.indexer.peers import EF_CONSTRUCTION as PEER_EF_CONSTRUCTION
from benchmarks.indexer.peers import M as PEER_M
from benchmarks.indexer.peers import hnswlib_bytes, hnswlib_index, hnswlib_search
from indexer.format.index_plan import parse_index_types, plan_indexes
from indexer.format.prefix_index import read_prefix_index
from indexer.format.prefix_writers import open_writer, train_index
from indexer.format.served_index import default_search_parameters, search_parameters
from indexer.format.tuning import (
    EF_LADDER,
    RECALL_TARGET,
    TUNING_QUERIES,
    drop_self,
    exact_neighbours,
    exact_rows,
    held_out_rows,
    tune_index,
)
from training.core.granularity import default_contract
from training.core.metrics import neighbour_recall

K = 10
SHARD = 50_000


def spectrum_rows(n: int, dim: int, clusters: int, alpha: float, seed: int) -> np.ndarray:
    """Unit rows [n, D]: normalise((c_label + 0.6·g / √D) ⊙ s), s_j = (j + 1)^(−α/2), made in
    blocks (c: unit Gaussian centres, g: Gaussian noise)."""
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, SHARD):
        out[start : min(n, start + SHARD)] = spectrum_block(start, n, dim, clusters, alpha, seed)
    return out


def spectrum_block(
    start: int, n: int, dim: int, clusters: int, alpha: float, seed: int
) -> np.ndarray:
    """Rows [start, min(n, start + SHARD)) of `spectrum_rows(n, ...)`, made alone (each block
    draws from its own seeded generator), so a gallery of any size is streamed block by block.
    `start` must be a multiple of SHARD."""
    if start % SHARD:
        raise ValueError(f"a block starts at a multiple of {SHARD}, not {start}")
    scale = ((np.arange(dim) + 1.0) ** (-alpha / 2)).astype(np.float32)
    centres = np.random.default_rng([seed, 1]).normal(size=(clusters, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    rng = np.random.default_rng([seed, 2, start])
    stop = min(n, start + SHARD)
    labels = rng.integers(0, clusters, stop - start)
    x = centres[labels] + 0.6 * rng.normal(size=(stop - start, dim)).astype(np.float32) / np.sqrt(
        dim
    )
    x *= scale
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def build_index(kind: str, rows: np.ndarray, folder: Path, seed: int) -> tuple[faiss.Index, dict]:
    """One prefix index at full D built with the indexer's writers; (opened index, record)."""
    n, dim = rows.shape
    contract = default_contract(dim)
    overrides = parse_index_types([f"{dim}={kind}"], contract)
    plan = next(p for p in plan_indexes(n, contract, 2**40, overrides) if p.length == dim)
    started = time.perf_counter()
    trained = None
    if plan.needs_training:
        pick = np.random.default_rng([seed, 3]).choice(n, plan.training_rows(n), replace=False)
        trained = train_index(plan, rows[np.sort(pick)])
    writer = open_writer(plan, folder, n, folder, trained)
    for start in range(0, n, SHARD):
        writer.add(rows[start : start + SHARD])
    writer.close()
    seconds = time.perf_counter() - started
    index = read_prefix_index(folder / plan.file, plan.factory, plan.ondisk)
    return index, {"factory": plan.factory, "build_seconds": round(seconds, 2)}


def leave_one_out_recall(search: Callable, queries: np.ndarray, selves, exact) -> float:
    found = np.stack([search(q) for q in queries])
    return neighbour_recall(drop_self(found, selves, K), exact)


def interleaved_ms(searches: dict[str, Callable], queries: np.ndarray, rounds: int) -> dict:
    """Median single-query milliseconds of each search: in each round every search answers all
    the queries in turn, the order of the searches rotating from round to round (so none
    always runs right after another has warmed the caches for the same query)."""
    times: dict[str, list[float]] = {name: [] for name in searches}
    names = list(searches)
    for round_ in range(rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            search = searches[name]
            for q in queries:
                started = time.perf_counter()
                search(q)
                times[name].append((time.perf_counter() - started) * 1e3)
    return {name: round(statistics.median(t), 4) for name, t in times.items()}


def qdrant_shard(rows: np.ndarray, folder: Path):
    """An embedded Qdrant shard over the rows (HNSW m = 32, ef_construct = 40, dot product);
    (shard, build seconds)."""
    import qdrant_edge as q

    config = q.EdgeConfig(
        vectors={"": q.EdgeVectorParams(size=rows.shape[1], distance=q.Distance.Dot)},
        hnsw_config=q.HnswIndexConfig(m=32, ef_construct=40, full_scan_threshold=10),
        optimizers=q.EdgeOptimizersConfig(default_segment_number=1, indexing_threshold=1),
    )
    started = time.perf_counter()
    shard = q.EdgeShard.create(str(folder), config)
    for start in range(0, len(rows), 10_000):
        block = rows[start : start + 10_000]
        points = [q.Point(start + i, row.tolist()) for i, row in enumerate(block)]
        shard.update(q.UpdateOperation.upsert_points(points))
    shard.optimize()
    return shard, time.perf_counter() - started


def qdrant_search(shard, ef: int) -> Callable:
    import qdrant_edge as q

    params = q.SearchParams(hnsw_ef=ef)

    def search(query: np.ndarray) -> np.ndarray:
        hits = shard.query(
            q.QueryRequest(limit=K + 1, query=q.Query.Nearest(query.tolist()), params=params)
        )
        found = np.full(K + 1, -1, dtype=np.int64)
        found[: len(hits)] = [h.id for h in hits]
        return found

    return search


def faiss_search(index: faiss.Index, setting: str) -> Callable:
    params = search_parameters(index, setting)
    return lambda q: index.search(q[None, :], K + 1, params=params)[1][0]


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--clusters", type=int, default=1024)
    parser.add_argument("--alpha", type=float, default=1.0, help="spectrum decay exponent")
    parser.add_argument("--queries", type=int, default=200, help="evaluation queries")
    parser.add_argument("--tuning-queries", type=int, default=TUNING_QUERIES)
    parser.add_argument("--target", type=float, default=RECALL_TARGET)
    parser.add_argument("--kinds", default="hnsw,ivfpq-refine")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved latency rounds")
    parser.add_argument("--no-qdrant", action="store_true")
    parser.add_argument("--no-hnswlib", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/ann_tuning.json"))
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ann-tuning-", dir=args.work))
    result: dict = {
        "rows": args.rows,
        "dim": args.dim,
        "alpha": args.alpha,
        "target": args.target,
        "k": K,
        "faiss_threads_build": faiss.omp_get_max_threads(),
    }
    try:
        started = time.perf_counter()
        rows = spectrum_rows(args.rows, args.dim, args.clusters, args.alpha, args.seed)
        result["generate_seconds"] = round(time.perf_counter() - started, 2)
        tuning_rows = set(held_out_rows(args.rows, args.tuning_queries, args.seed).tolist())
        rng = np.random.default_rng([args.seed, 4])
        pool = np.setdiff1d(
            rng.choice(args.rows, 2 * args.queries + len(tuning_rows), replace=False),
            list(tuning_rows),
        )
        selves = np.sort(pool[: args.queries])
        queries = rows[selves]
        exact = drop_self(
            exact_neighbours(lambda a, b: rows[a:b], args.rows, queries, K + 1), selves, K
        )
        flat = faiss.IndexFlatIP(args.dim)
        flat.add(rows)
        flat_search = lambda q: flat.search(q[None, :], K + 1)[1][0]  # noqa: E731
        build_threads = faiss.omp_get_max_threads()
        indexes = {}
        result["kinds"] = {}
        for kind in [k for k in args.kinds.split(",") if k]:
            folder = work / kind
            folder.mkdir()
            index, record = build_index(kind, rows, folder, args.seed)
            reader = exact_rows({args.dim: index}, args.dim)
            assert reader is not None
            tuning = tune_index(index, reader, args.target, args.tuning_queries, seed=args.seed)
            default = default_search_parameters(record["factory"], args.dim)
            faiss.omp_set_num_threads(1)
            searches = {
                "flat": flat_search,
                "default": faiss_search(index, default),
                "tuned": faiss_search(index, tuning.chosen),
            }
            recall = {
                name: round(leave_one_out_recall(searches[name], queries, selves, exact), 4)
                for name in ("default", "tuned")
            }
            ms = interleaved_ms(searches, queries, args.rounds)
            faiss.omp_set_num_threads(build_threads)
            total = record["build_seconds"] + tuning.seconds
            result["kinds"][kind] = {
                **record,
                "default_search": default,
                "tuned_search": tuning.chosen,
                "tuning_status": tuning.status,
                "tuning_recall": tuning.recall,
                "tuning_seconds": tuning.seconds,
                "tuning_share_of_build": round(tuning.seconds / total, 4),
                "operating_points": [vars(p) for p in tuning.points],
                "recall_at_10": recall,
                "median_ms": ms,
                "speedup_over_flat": {
                    name: round(ms["flat"] / ms[name], 2) for name in ("default", "tuned")
                },
            }
            indexes[kind] = (index, tuning)
            publish(result, args.json)
        if not args.no_qdrant and "hnsw" in indexes:
            hnsw = result["kinds"]["hnsw"]
            result["qdrant"] = compare_qdrant(
                rows, queries, selves, exact, indexes["hnsw"], work, args.rounds, args.target
            )
            result["qdrant"]["strata_build_seconds"] = {
                "build": hnsw["build_seconds"],
                "with_tuning": round(hnsw["build_seconds"] + hnsw["tuning_seconds"], 2),
            }
        if not args.no_hnswlib and "hnsw" in indexes:
            result["hnswlib"] = compare_hnswlib(
                rows, queries, selves, exact, indexes["hnsw"], work, args.rounds, args.target
            )
        return publish(result, args.json)
    finally:
        faiss.omp_set_num_threads(faiss.omp_get_max_threads())
        shutil.rmtree(work, ignore_errors=True)


def compare_qdrant(
    rows, queries, selves, exact, strata, work: Path, rounds: int, target: float
) -> dict:
    """Qdrant's HNSW at the smallest hnsw_ef whose recall@10 reaches the target on the
    evaluation queries, against Strata's HNSW at its tuned setting (which reaches it too), and
    Qdrant's ef ladder up to where it matches Strata's recall there, if it does."""
    import qdrant_edge

    index, tuning = strata
    strata_search = faiss_search(index, tuning.chosen)
    faiss.omp_set_num_threads(1)
    strata_recall = leave_one_out_recall(strata_search, queries, selves, exact)
    shard, seconds = qdrant_shard(rows, work / "qdrant")
    ladder = []
    for ef in EF_LADDER:
        recall = leave_one_out_recall(qdrant_search(shard, ef), queries, selves, exact)
        ladder.append({"hnsw_ef": ef, "recall_at_10": round(recall, 4)})
        if recall >= max(strata_recall, target):
            break
    at_target = next((p for p in ladder if p["recall_at_10"] >= target), ladder[-1])
    ef = at_target["hnsw_ef"]
    ms = interleaved_ms(
        {"strata": strata_search, "qdrant": qdrant_search(shard, ef)}, queries, rounds
    )
    shard.close()
    return {
        "engine": f"qdrant-edge-py {getattr(qdrant_edge, '__version__', '')}".strip(),
        "hnsw": "m=32, ef_construct=40",
        "build_seconds": round(seconds, 2),
        "ef_ladder": ladder,
        "hnsw_ef": ef,
        "strata_search": tuning.chosen,
        "recall_at_10": {"strata": round(strata_recall, 4), "qdrant": at_target["recall_at_10"]},
        "qdrant_matches_strata_recall": ladder[-1]["recall_at_10"] >= strata_recall,
        "median_ms": ms,
        "qdrant_over_strata": round(ms["qdrant"] / ms["strata"], 2),
    }


def compare_hnswlib(
    rows, queries, selves, exact, strata, work: Path, rounds: int, target: float
) -> dict:
    """hnswlib's HNSW at the smallest ef reaching the target, against Strata's tuned HNSW."""
    index, tuning = strata
    strata_search = faiss_search(index, tuning.chosen)
    faiss.omp_set_num_threads(1)
    strata_recall = leave_one_out_recall(strata_search, queries, selves, exact)
    peer, seconds = hnswlib_index(np.ascontiguousarray(rows, dtype=np.float32))
    ladder = []
    for ef in EF_LADDER:
        recall = leave_one_out_recall(hnswlib_search(peer, ef, K + 1), queries, selves, exact)
        ladder.append({"ef": ef, "recall_at_10": round(recall, 4)})
        if recall >= max(strata_recall, target):
            break
    at_target = next((p for p in ladder if p["recall_at_10"] >= target), ladder[-1])
    ms = interleaved_ms(
        {"strata": strata_search, "hnswlib": hnswlib_search(peer, at_target["ef"], K + 1)},
        queries,
        rounds,
    )
    return {
        "hnsw": f"M={PEER_M}, ef_construction={PEER_EF_CONSTRUCTION}",
        "build_seconds": round(seconds, 2),
        "bytes_per_row": round(hnswlib_bytes(peer, work) / len(rows), 1),
        "ef_ladder": ladder,
        "ef": at_target["ef"],
        "recall_at_10": {"strata": round(strata_recall, 4), "hnswlib": at_target["recall_at_10"]},
        "median_ms": ms,
        "hnswlib_over_strata": round(ms["hnswlib"] / ms["strata"], 2),
    }


if __name__ == "__main__":
    main()
