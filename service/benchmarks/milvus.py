"""The Milvus backend against local FAISS on the same bundle, in the same run.

1. `serve`: a spectrum bundle (service/benchmarks/funnel.spectrum_bundle: every prefix Flat) of
   --rows rows, exported to Milvus (Milvus Lite, a gRPC server in this process, unless --to
   names another engine), then searched with the same vector queries through the local
   local `SearchEngine` and the Milvus-backed one:
   - parity: the share of queries whose top-10 is the same list, and recall@10 against local
     Flat, at the object and full prefixes; for Milvus FLAT and, exported again, Milvus HNSW
     (M 32, efConstruction 200, ef --ef);
   - latency: the median of one-query searches, the two engines timed one after another for
     every query (training.benchmarks.interleaved), and its ratio Milvus / FAISS;
   - QPS: batches of --batch vector queries through `search_batch`, interleaved the same way.
2. `export`: the time to export --export-rows rows of a spectrum bundle (build time apart).

    python -m service.benchmarks.milvus --rows 20000 --json runs/bench/milvus.json
    python -m service.benchmarks.milvus --parts export --export-rows 1000000

Milvus Lite is Milvus's single-process engine (pure Python in milvus-lite 3): its figures say
what a replica pays per engine round trip and scan here, not what a cluster's query nodes do.
"""

from __future__ import annotations

import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from indexer.benchmarks.synthetic import spectrum_rows
from indexer.format.bundle import Bundle
from indexer.milvus.export import export_bundle
from indexer.milvus.store import MilvusStore
from service.benchmarks.funnel import spectrum_bundle
from service.engine.milvus_backend import milvus_engine
from service.engine.plans import FunnelConfig
from service.engine.search import EngineConfig, SearchEngine
from service.results import SearchQuery
from training.benchmarks import benchmark_parser, interleaved, publish

GRANULARITIES = ("object", "full")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lite_server(data: Path) -> tuple[str, Any]:
    """A Milvus Lite gRPC server in this process: (its milvus:// URI, a stop function)."""
    from milvus_lite.adapter.grpc.server import start_server_in_thread

    port = free_port()
    server, db, _ = start_server_in_thread(str(data), port=port)

    def stop() -> None:
        server.stop(grace=0)
        db.close()

    return f"milvus://127.0.0.1:{port}", stop


def parity(local: SearchEngine, remote: SearchEngine, queries: np.ndarray) -> dict[str, Any]:
    """Per granularity: same top-10 (share of queries) and recall@10 against local Flat."""
    out: dict[str, Any] = {}
    for granularity in GRANULARITIES:
        same, recall = 0, []
        for q in queries:
            query = SearchQuery.of(vector=q, granularity=granularity, k=10)
            a, b = local.search(query).ids, remote.search(query).ids
            same += a == b
            recall.append(len(set(a) & set(b)) / len(a))
        out[granularity] = {
            "same_top10": same / len(queries),
            "recall_at_10": float(np.mean(recall)),
            "queries": len(queries),
        }
    return out


def timing(
    local: SearchEngine, remote: SearchEngine, queries: np.ndarray, rounds: int, batch: int
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for granularity in GRANULARITIES:
        one = [SearchQuery.of(vector=q, granularity=granularity, k=10) for q in queries]
        single = interleaved(
            {
                "faiss": lambda i, one=one: local.search(one[i % len(one)]),
                "milvus": lambda i, one=one: remote.search(one[i % len(one)]),
            },
            len(one),
            rounds,
        )
        batches = [one[s : s + batch] for s in range(0, len(one) - batch + 1, batch)] or [one]
        batched = interleaved(
            {
                "faiss": lambda i, b=batches: local.search_batch(b[i % len(b)]),
                "milvus": lambda i, b=batches: remote.search_batch(b[i % len(b)]),
            },
            len(batches),
            rounds,
        )
        size = len(batches[0])
        out[granularity] = {
            "latency_ms": {k: v * 1000 for k, v in single.items()},
            "latency_ratio_milvus_over_faiss": single["milvus"] / single["faiss"],
            "qps": {k: size / v for k, v in batched.items()},
            "qps_ratio_milvus_over_faiss": batched["faiss"] / batched["milvus"],
            "batch": size,
        }
    return out


def serve_part(args: Any, work: Path) -> dict[str, Any]:
    started = time.perf_counter()
    bundles = spectrum_bundle(work / "serve", args.rows, args.dim, 1.0)
    built = time.perf_counter() - started
    bundle = Bundle.open(bundles)
    config = EngineConfig(funnel=FunnelConfig(enabled=False))  # direct, as the engine scans
    local = SearchEngine(bundle, None, config)
    target, stop = (args.to, None) if args.to else lite_server(work / "lite.db")
    try:
        store = MilvusStore(target, timeout_s=600)
        flat = export_bundle(bundle, store, "bench", index_kind="FLAT")
        remote = milvus_engine(bundle, None, store, flat.collection, config, name="bench")
        queries = spectrum_rows(args.queries, args.dim, 1.0, seed=99)
        result: dict[str, Any] = {
            "rows": args.rows,
            "dim": args.dim,
            "engine": "milvus-lite (in-process gRPC server)" if stop else args.to,
            "build_seconds": built,
            "export_seconds": flat.seconds,
            "parity_flat": parity(local, remote, queries),
            "timing_flat": timing(local, remote, queries, args.rounds, args.batch),
        }
        store.client.drop_alias("bench")
        hnsw = export_bundle(bundle, store, "bench-hnsw", index_kind="HNSW")
        remote_hnsw = milvus_engine(
            bundle, None, store, hnsw.collection, config, name="bench-hnsw", ef=args.ef
        )
        result["parity_hnsw"] = parity(local, remote_hnsw, queries) | {"ef": args.ef}
        result["hnsw_export_seconds"] = hnsw.seconds
        store.close()
    finally:
        if stop is not None:
            stop()
    return result


def export_part(args: Any, work: Path) -> dict[str, Any]:
    started = time.perf_counter()
    bundles = spectrum_bundle(work / "export", args.export_rows, args.dim, 1.0)
    built = time.perf_counter() - started
    target, stop = (args.to, None) if args.to else lite_server(work / "export.db")
    try:
        store = MilvusStore(target, timeout_s=3600)
        summary = export_bundle(Bundle.open(bundles), store, "bench-export", index_kind="FLAT")
        store.close()
    finally:
        if stop is not None:
            stop()
    return {
        "rows": args.export_rows,
        "dim": args.dim,
        "prefixes": Bundle.open(bundles).prefix_lengths,
        "build_seconds": built,
        "export_seconds": summary.seconds,
        "rows_per_second": args.export_rows / summary.seconds,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--parts", default="serve,export")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--export-rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--ef", type=int, default=64)
    parser.add_argument("--to", default=None, help="an engine to use instead of Milvus Lite")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/milvus.json"))
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir="runs") as work:
        if "serve" in parts:
            result["serve"] = serve_part(args, Path(work))
        if "export" in parts:
            result["export"] = export_part(args, Path(work))
    return publish(result, args.json)


if __name__ == "__main__":
    main()
