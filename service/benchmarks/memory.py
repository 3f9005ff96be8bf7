"""Bytes per row of a bundle before (a float32 file per prefix) and after the shared store, and
per granularity recall@10 and p50 beside hnswlib's full-D HNSW at equal recall, in one run.

1. N × D spectrum rows (indexer/benchmarks/ann_tuning.spectrum_rows: clustered, variance
   ∝ (j + 1)^−α) as a float16 cache, an identity GraSP-VL artifact and a random CEDAR (k = 32).
2. Two bundles of them: `before` (`--store none`, every prefix Flat: the old layout) and
   `after` (`--store float16`, the shortest prefix an HNSW32 of its own: the shortlist). Per
   part (indexer/format/footprint.py): bytes per row on disk and resident.
3. hnswlib (M = 32, ef_construction = 40) over the full rows: its bytes per row; Qdrant's
   embedded engine (m = 32) over the same rows: its folder's bytes per row (`--no-qdrant`).
4. Per granularity L, on held-out gallery rows (leave one out), truth = exact float32 search
   at L (the `before` bundle's Flat): Strata `after` — the shortest prefix its tuned HNSW, each
   longer one a funnel (HNSW shortlist of k·F, exact rerank from the store) at the smallest F
   of 10, 20, 50, 100 reaching recall 0.95 on these queries — its recall@10; hnswlib at the
   smallest ef whose recall@10 against exact full-D search reaches Strata's at L; p50 of both,
   one thread, interleaved rounds, and their ratio.

    python -m service.benchmarks.memory --rows 100000
    python -m service.benchmarks.memory --rows 1000000 --memory-only
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa

from indexer.benchmarks.ann_tuning import interleaved_ms, spectrum_rows
from indexer.benchmarks.peers import hnswlib_bytes, hnswlib_index, hnswlib_search
from indexer.benchmarks.synthetic import random_cedar_artifact
from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.format.bundle import Bundle
from indexer.format.footprint import footprint
from indexer.format.tuning import EF_LADDER, drop_self
from service.engine.plans import Planner
from training.benchmarks import benchmark_parser, publish
from training.core.artifacts import TransformArtifact
from training.core.cache import CacheManifest, write_manifest, write_shard
from training.core.metrics import neighbour_recall

K, SHARD, FACTORS, TARGET = 10, 50_000, (10, 20, 50, 100), 0.95


def write_inputs(work: Path, rows: int, dim: int, alpha: float) -> tuple[Path, np.ndarray]:
    """The cache, artifacts, and the rows themselves (float16-rounded, as the cache holds)."""
    manifest = CacheManifest(encoder="synthetic", dim=dim, dtype="float16", modalities=["image"])
    x = spectrum_rows(rows, dim, 1024, alpha, seed=0)
    for index, start in enumerate(range(0, rows, SHARD)):
        part = x[start : start + SHARD]
        ids = pa.table({"id": [f"row-{i}" for i in range(start, start + len(part))]})
        manifest.shards.append(write_shard(work / "cache", index, {"image": part}, ids, "float16"))
    manifest.complete = True
    write_manifest(work / "cache", manifest)
    TransformArtifact.identity(dim, method="grasp-vl").save(work / "grasp")
    random_cedar_artifact(dim, 32, x[:5000]).save(work / "cedar")
    return work, x.astype(np.float16).astype(np.float32)


def build(work: Path, name: str, store: str, index_types: tuple[str, ...]) -> Bundle:
    config = BuildConfig(
        cache=work / "cache", grasp=work / "grasp", cedar=work / "cedar", out=work / name,
        store=store, index_types=index_types, progress=False, verify_sample=0,
    )  # fmt: skip
    return Bundle.open(build_bundle(config).path).load()


def parts(bundle: Bundle) -> dict:
    rows = bundle.rows
    found = {p.name: (p.disk, p.resident) for p in footprint(bundle.manifest)}
    out = {
        n: {"disk": round(d / rows, 1), "resident": round(r / rows, 1)}
        for n, (d, r) in found.items()
    }
    out["total"] = {
        "disk": round(sum(d for d, _ in found.values()) / rows, 1),
        "resident": round(sum(r for _, r in found.values()) / rows, 1),
    }
    return out


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def qdrant_bytes(rows: np.ndarray, work: Path) -> float:
    from indexer.benchmarks.ann_tuning import qdrant_shard

    shard, _ = qdrant_shard(rows, work / "qdrant")
    shard.close()
    return round(folder_bytes(work / "qdrant") / len(rows), 1)


def granularities(before: Bundle, after: Bundle, x, peer, queries: int, rounds: int) -> dict:
    """Per granularity: recall@10 and p50 of Strata (after) and hnswlib at equal recall."""
    faiss.omp_set_num_threads(1)
    selves = np.sort(np.random.default_rng(7).choice(len(x), queries, replace=False))
    rotated = after.rotate(x[selves])
    planner = Planner(after)
    shortest = min(after.prefix_lengths)
    full_truth = drop_self(before.search_prefix(after.dim, rotated, K + 1)[1], selves, K)
    out = {}
    for granularity, length in sorted(after.contract.items(), key=lambda g: g[1]):
        truth = drop_self(before.search_prefix(length, rotated, K + 1)[1], selves, K)

        def strata(q, factor=0, length=length):
            if length == shortest:
                return after.search_prefix(length, q[None, :], K + 1)[1][0]
            return planner.funnel(shortest, factor, q[None, :], length, K + 1)[1][0]

        factor, recall = 0, 0.0
        for factor in (0,) if length == shortest else FACTORS:
            found = np.stack([strata(q, factor) for q in rotated])
            recall = neighbour_recall(drop_self(found, selves, K), truth)
            if recall >= TARGET:
                break
        ef, peer_recall = EF_LADDER[-1], 0.0
        for ef in EF_LADDER:
            found = np.stack([hnswlib_search(peer, ef, K + 1)(q) for q in rotated])
            peer_recall = neighbour_recall(drop_self(found, selves, K), full_truth)
            if peer_recall >= recall:
                break
        ms = interleaved_ms(
            {
                "strata": lambda q, f=factor: strata(q, f),
                "hnswlib": hnswlib_search(peer, ef, K + 1),
            },
            rotated,
            rounds,
        )
        out[granularity.value] = {
            "prefix": length,
            "strata": "HNSW direct" if length == shortest else f"funnel S={shortest} F={factor}",
            "recall_at_10": round(recall, 4),
            "hnswlib_ef": ef,
            "hnswlib_recall_at_10": round(peer_recall, 4),
            "p50_ms": ms,
            "strata_over_hnswlib": round(ms["strata"] / ms["hnswlib"], 2),
        }
        print(granularity.value, out[granularity.value], flush=True)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory-only", action="store_true", help="no latency/recall part")
    parser.add_argument("--no-qdrant", action="store_true")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/memory.json"))
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="memory-", dir=args.work))
    result: dict = {"rows": args.rows, "dim": args.dim, "alpha": args.alpha, "k": K}
    try:
        started = time.perf_counter()
        _, x = write_inputs(work, args.rows, args.dim, args.alpha)
        before = build(work, "before", "none", ())
        result["before"] = parts(before)
        publish(result, args.json)
        after = build(work, "after", "float16", ("object=hnsw",))
        result["after"] = parts(after)
        publish(result, args.json)
        # one thread when its speed is compared: a threaded build's graph, and so the ef
        # that reaches Strata's recall, differ from run to run (caption: ef 128 or 192)
        peer, seconds = hnswlib_index(x, threads=-1 if args.memory_only else 1)
        result["hnswlib"] = {
            "bytes_per_row": round(hnswlib_bytes(peer, work) / args.rows, 1),
            "build_seconds": round(seconds, 1),
        }
        if not args.no_qdrant:
            try:
                result["qdrant_edge"] = {"disk_bytes_per_row": qdrant_bytes(x, work)}
            except ImportError as exc:  # the bench extra is not installed
                result["qdrant_edge"] = {"skipped": str(exc)}
        publish(result, args.json)
        if not args.memory_only:
            result["granularities"] = granularities(
                before, after, x, peer, args.queries, args.rounds
            )
        result["seconds"] = round(time.perf_counter() - started, 1)
        return publish(result, args.json)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
