"""Bytes per row of a bundle, per part, resident and on disk, and per granularity recall@10
and p50 beside hnswlib's full-D HNSW at equal recall, in one run, for the layouts that
`strata index build` writes.

1. N × D spectrum rows (benchmarks/indexer/ann_tuning.spectrum_rows: clustered, variance
   ∝ (j + 1)^−α) as a float16 cache, an identity GraSP-VL artifact and a random CEDAR (k = 32).
2. Bundles of them, bytes per row per part (indexer/format/footprint.py):
   - `default`: `strata index build` with no flags (an int8 store; past 50k rows the shortest
     prefix as IVF-SQ8 codes reranked from it, indexer/format/store_rerank.py);
   - `on_disk`: the same with `--store-on-disk` (the store read through mmap for reranks only);
   - `per_prefix` (`--before`; `--store none`, the layout before the store: a float32 index per
     prefix, which the rules make HNSW32 at every prefix past 200k rows).
3. hnswlib (M = 32, ef_construction = 200, as its own docs build it) over the full rows: its
   bytes per row (with `--prefix-peers`, one more over each shorter prefix's rows, the
   strongest baseline a user could build for that granularity); Qdrant's embedded engine
   (m = 32) over the same rows: its folder's bytes per row (`--no-qdrant`).
4. Per granularity L, on held-out gallery rows (leave one out), truth = exact float32 search
   at L: the default bundle as a service plans it (service/engine/plans.py: the object prefix
   its reranked codes; each longer one the funnel the build calibrated and recorded, else a
   scan of the store) — its recall@10, its reranks per query (rows read from the store) and the
   bytes they read; hnswlib at the smallest ef (from k + 1) whose recall@10 against exact full-D
   search reaches Strata's at L; p50 of both, one thread, interleaved rounds, and their ratio.

    python -m benchmarks.service.layout.memory --rows 100000 --before
    python -m benchmarks.service.layout.memory --rows 1000000

With `--cache`, `--grasp` and `--cedar` (e.g. `strata demo`'s), the rows are a cache the project
made instead of spectrum rows: its embeddings under its own rotation, the peers over the same
rotated rows.

hnswlib and Qdrant's engine are the `bench` extra: `.venv/bin/pip install -e '.[bench]'`.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa

from benchmarks.harness import benchmark_parser, publish
from benchmarks.indexer.ann_tuning import interleaved_ms, spectrum_rows
from benchmarks.indexer.peers import hnswlib_bytes, hnswlib_index, hnswlib_search
from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.format.bundle import Bundle
from indexer.format.footprint import footprint
from indexer.format.store import VectorStore
from indexer.format.store_rerank import StoreRerank
from indexer.format.tuning import EF_LADDER, drop_self
from service.engine.plans import Planner
from training.core.artifacts import TransformArtifact
from training.core.cache import CacheManifest, EmbeddingCache, write_manifest, write_shard
from training.core.metrics import neighbour_recall, prefix_vectors
from training.synthetic import random_cedar_artifact

K, SHARD = 10, 50_000
# hnswlib's ef from the least it takes (ef ≥ the k + 1 asked, leave one out) up: the peer at
# the smallest breadth that reaches Strata's recall, not at the tuning ladder's first rung
PEER_EF = (K + 1, 12, 14, *EF_LADDER)


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


def build(work: Path, name: str, **options) -> Bundle:
    config = BuildConfig(
        cache=work / "cache",
        grasp=work / "grasp",
        cedar=work / "cedar",
        out=work / name,
        progress=False,
        verify_sample=0,
        **options,
    )
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
    from benchmarks.indexer.ann_tuning import qdrant_shard

    shard, _ = qdrant_shard(rows, work / "qdrant")
    shard.close()
    return round(folder_bytes(work / "qdrant") / len(rows), 1)


def strata_search(bundle: Bundle, planner: Planner, length: int) -> tuple[Callable, str]:
    """One query's search at prefix L as the engine plans it unfiltered (the calibrated funnel
    where one was found, else direct), and the plan in words."""
    choice = planner.choices.get(length)
    if choice is None:
        return (lambda q: bundle.search_prefix(length, q[None, :], K + 1)[1][0]), "direct"
    s, f = choice.shortlist_prefix, choice.factor
    wider = f" ({choice.shortlist_search})" if choice.shortlist_search else ""
    plan = f"funnel S={s} F={f}{wider}"
    return (lambda q: planner.funnel(s, f, q[None, :], length, K + 1)[1][0]), plan


def rerank_row_bytes(store: VectorStore, length: int) -> int:
    """Bytes a rerank reads of one row: its head's codes, its norm at L, and the row of block
    scales of a rotated int8 store."""
    scales = 0 if store.scales is None else store.scales.shape[1] * store.scales.itemsize
    return length * store.codes.itemsize + 4 + scales


def reranks_per_query(bundle: Bundle, planner: Planner, length: int) -> int:
    """Rows one query reads from the store: the codes' k·F_S at the shortest prefix, the
    funnel's k·F elsewhere (none for a scan, which reads every row)."""
    choice = planner.choices.get(length)
    if choice is not None:
        return (K + 1) * choice.factor
    index = bundle.index(length)
    return index.fetch(K + 1) if isinstance(index, StoreRerank) else bundle.rows


def granularities(
    bundle: Bundle, x, peer, queries: int, rounds: int, prefix_peers: bool = False
) -> dict:
    """Per granularity: recall@10, reranks and p50 of Strata and hnswlib at equal recall (with
    `prefix_peers`, also an hnswlib built on that prefix's own rows); `x` the gallery's rows as
    the bundle rotates them, unit length (`rotated_rows`)."""
    faiss.omp_set_num_threads(1)
    selves = np.sort(np.random.default_rng(7).choice(len(x), queries, replace=False))
    rotated = x[selves]  # the gallery's rows as the bundle rotates them, their own queries
    started = time.perf_counter()
    planner = Planner(bundle)
    calibration = round(time.perf_counter() - started, 1)
    full_truth = exact_truth(x, selves, bundle.dim)
    out: dict = {"calibration_seconds": calibration, "plans_recorded": planner.recorded}
    for granularity, length in sorted(bundle.contract.items(), key=lambda g: g[1]):
        truth = exact_truth(x, selves, length)
        search, plan = strata_search(bundle, planner, length)
        found = np.stack([search(q) for q in rotated])
        recall = neighbour_recall(drop_self(found, selves, K), truth)
        ef, peer_recall = smallest_ef(peer, rotated, selves, full_truth, recall)
        arms = {"strata": search, "hnswlib": hnswlib_search(peer, ef, K + 1)}
        own: dict = {}
        if prefix_peers and length < bundle.dim:  # at D the full-length peer is that peer
            heads = np.ascontiguousarray(prefix_vectors(x, length))
            at_prefix, seconds = hnswlib_index(heads, threads=1)
            queries_at = np.ascontiguousarray(prefix_vectors(rotated, length))
            own_ef, own_recall = smallest_ef(at_prefix, queries_at, selves, truth, recall)
            own = {"ef": own_ef, "recall_at_10": round(own_recall, 4), "build_seconds": seconds}
            at_ef = hnswlib_search(at_prefix, own_ef, K + 1)
            arms["hnswlib_at_prefix"] = lambda q, at_ef=at_ef, n=length: at_ef(
                prefix_vectors(q[None, :], n)[0]
            )
        ms = interleaved_ms(arms, rotated, rounds)
        reranks = reranks_per_query(bundle, planner, length)
        out[granularity.value] = {
            "prefix": length,
            "strata": plan,
            "recall_at_10": round(recall, 4),
            "reranks_per_query": reranks,
            "rerank_bytes_per_query": reranks * rerank_row_bytes(bundle.store, length),
            "hnswlib_ef": ef,
            "hnswlib_recall_at_10": round(peer_recall, 4),
            "p50_ms": ms,
            "strata_over_hnswlib": round(ms["strata"] / ms["hnswlib"], 2),
        }
        if own:
            own["strata_over"] = round(ms["strata"] / ms["hnswlib_at_prefix"], 2)
            out[granularity.value]["hnswlib_at_prefix"] = own
        print(granularity.value, out[granularity.value], flush=True)
    return out


def smallest_ef(
    peer, queries: np.ndarray, selves: np.ndarray, truth: np.ndarray, recall: float
) -> tuple[int, float]:
    """The smallest of PEER_EF whose recall@10 against `truth` reaches `recall` (else the
    largest), and the recall it reached."""
    ef, reached = PEER_EF[-1], 0.0
    for ef in PEER_EF:
        found = np.stack([hnswlib_search(peer, ef, K + 1)(q) for q in queries])
        reached = neighbour_recall(drop_self(found, selves, K), truth)
        if reached >= recall:
            break
    return ef, reached


def rotated_rows(bundle: Bundle, x: np.ndarray) -> np.ndarray:
    """The gallery's rows as the bundle serves them: p_D of their GraSP rotation, unit length
    (the spectrum rows themselves: their rotation is the identity)."""
    return np.ascontiguousarray(prefix_vectors(bundle.rotate(x), bundle.dim))


def real_inputs(work: Path, cache: Path, grasp: Path, cedar: Path, modality: str) -> np.ndarray:
    """A cache and artifacts the project made (`strata demo`'s), linked into `work` as the
    builds read them; the cache's rows."""
    for name, source in (("cache", cache), ("grasp", grasp), ("cedar", cedar)):
        (work / name).symlink_to(source.resolve(), target_is_directory=True)
    return np.asarray(EmbeddingCache.open(cache).embeddings(modality), dtype=np.float32)


def exact_truth(x: np.ndarray, selves: np.ndarray, length: int) -> np.ndarray:
    """Exact float32 top-k at prefix L of the held-out rows, their own rows dropped (`x` the
    rotated rows: p_L is their renormalised head)."""
    gallery = np.ascontiguousarray(prefix_vectors(x, length))
    flat = faiss.IndexFlatIP(length)
    flat.add(gallery)
    return drop_self(flat.search(gallery[selves], K + 1)[1], selves, K)


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory-only", action="store_true", help="no latency/recall part")
    parser.add_argument("--before", action="store_true", help="also the per-prefix layout")
    parser.add_argument("--no-qdrant", action="store_true")
    parser.add_argument(
        "--prefix-peers",
        action="store_true",
        help="also an hnswlib (M 32, ef_construction 200) built on each shorter prefix's rows",
    )
    parser.add_argument("--cache", type=Path, help="a real cache (with --grasp and --cedar)")
    parser.add_argument("--grasp", type=Path, help="the GraSP-VL artifact of --cache")
    parser.add_argument("--cedar", type=Path, help="the CEDAR artifact of --cache")
    parser.add_argument("--modality", default="text", help="the embeddings of --cache indexed")
    parser.add_argument(
        "--index-type",
        action="append",
        default=[],
        help="PREFIX=KIND for the default bundle, as `strata index build --index-type` takes it",
    )
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/memory.json"))
    args = parser.parse_args(argv)
    try:
        import hnswlib  # noqa: F401
    except ImportError:
        parser.exit(2, "memory: hnswlib is not installed: .venv/bin/pip install -e '.[bench]'\n")
    real = (args.cache, args.grasp, args.cedar)
    if any(real) and not all(real):
        parser.exit(2, "memory: --cache, --grasp and --cedar go together\n")
    work = Path(tempfile.mkdtemp(prefix="memory-", dir=args.work))
    result: dict = {"rows": args.rows, "dim": args.dim, "alpha": args.alpha, "k": K}
    try:
        started = time.perf_counter()
        if args.cache is not None:
            x = real_inputs(work, args.cache, args.grasp, args.cedar, args.modality)
            result = {"rows": len(x), "dim": x.shape[1], "cache": str(args.cache), "k": K}
        else:
            _, x = write_inputs(work, args.rows, args.dim, args.alpha)
        n = len(x)
        if args.before:
            result["per_prefix"] = parts(build(work, "per_prefix", store="none"))
            shutil.rmtree(work / "per_prefix")
            publish(result, args.json)
        tick = time.perf_counter()
        default = build(work, "default", index_types=tuple(args.index_type))
        result["default"] = parts(default)
        result["default"]["build_seconds"] = round(time.perf_counter() - tick, 1)
        result["default"]["layout"] = [
            f"{p.length}: {p.factory}"
            + (" (store)" if p.store else " (rerank)" if p.rerank else "")
            for p in default.manifest.prefixes
        ]
        result["on_disk"] = parts(
            build(work, "on_disk", store_on_disk=True, index_types=tuple(args.index_type))
        )
        shutil.rmtree(work / "on_disk")
        publish(result, args.json)
        x = rotated_rows(default, x)  # what is served, and what the peers index
        # one thread when its speed is compared: a threaded build's graph, and so the ef
        # that reaches Strata's recall, differ from run to run (caption: ef 128 or 192)
        peer, seconds = hnswlib_index(x, threads=-1 if args.memory_only else 1)
        result["hnswlib"] = {
            "bytes_per_row": round(hnswlib_bytes(peer, work) / n, 1),
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
                default, x, peer, args.queries, args.rounds, args.prefix_peers
            )
        result["seconds"] = round(time.perf_counter() - started, 1)
        return publish(result, args.json)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
