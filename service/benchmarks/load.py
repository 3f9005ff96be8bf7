"""Load on a real server: QPS and latency percentiles at several client concurrencies, with the
encoder micro-batching on and off, side by side in one process.

The gallery is synthetic (N clustered 384-d rows in a float16 cache, random GraSP-VL and CEDAR
artifacts, a bundle built by the indexer); the queries are real: caption-like texts embedded by
MiniLM on the server, routed by AUTO. Each arm starts its own server on a free port; C client
threads, each with its own channel, send queries back to back for a fixed count.

    python -m service.benchmarks.load                    # 100,000 rows, concurrency 1, 8, 32
    python -m service.benchmarks.load --rows 20000 --queries 64
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from indexer.benchmarks.synthetic import (
    random_cedar_artifact,
    random_grasp_artifact,
    write_synthetic_cache,
)
from indexer.build import BuildConfig, build_bundle
from indexer.bundle import Bundle
from service.batching import BatchingConfig
from service.client import StrataClient
from service.search import SearchEngine
from service.server import BackgroundServer, ServerConfig
from training.benchmarks import publish
from training.embedding.cache import EmbeddingCache
from training.embedding.encoders import load_encoder

QUERIES = (
    "a dog", "a red car", "a man riding a bicycle", "two children playing in the snow",
    "a black dog chasing a ball on the beach", "a woman in a blue dress", "a bird",
    "a boy jumping into a pool", "people walking on a busy street", "a white horse",
)  # fmt: skip


def build_gallery(work: Path, rows: int, dim: int) -> Path:
    cache = write_synthetic_cache(work / "cache", rows, dim, modality="text")
    sample = np.asarray(EmbeddingCache.open(cache).embeddings("text")[:5000], dtype=np.float32)
    random_grasp_artifact(dim).save(work / "grasp")
    random_cedar_artifact(dim, 32, sample).save(work / "cedar")
    build_bundle(
        BuildConfig(cache, work / "grasp", work / "cedar", work / "bundles", progress=False)
    )
    return work / "bundles"


def run_arm(engine: SearchEngine, batching: bool, concurrency: int, queries: int) -> dict:
    """`concurrency` threads share `queries` searches; latency per call, QPS over the arm."""
    config = ServerConfig(port=0, batching=BatchingConfig(enabled=batching))
    latencies: list[float] = []
    lock = threading.Lock()
    per_thread = max(1, queries // concurrency)
    with BackgroundServer(engine, config) as server:

        def worker(index: int) -> None:
            with StrataClient(server.target) as client:
                client.search(QUERIES[index % len(QUERIES)], k=10)  # connect and warm
                own = []
                for i in range(per_thread):
                    started = time.perf_counter()
                    client.search(QUERIES[(index + i) % len(QUERIES)], k=10)
                    own.append(time.perf_counter() - started)
            with lock:
                latencies.extend(own)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "batching": batching,
        "concurrency": concurrency,
        "queries": len(latencies),
        "qps": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=256, help="searches per arm")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/service_load.json"))
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory(prefix="strata-load-") as folder:
        bundles = build_gallery(Path(folder), args.rows, 384)
        engine = SearchEngine(Bundle.open(bundles), load_encoder("minilm", device="cpu"))
        arms = [
            run_arm(engine, batching, concurrency, args.queries)
            for concurrency in levels
            for batching in (True, False)  # side by side, alternating
        ]
    result = {
        "benchmark": "service_load",
        "rows": args.rows,
        "encoder": "minilm (cpu)",
        "arms": arms,
        "qps_ratio_batching_on_over_off": {
            str(c): next(a["qps"] for a in arms if a["concurrency"] == c and a["batching"])
            / next(a["qps"] for a in arms if a["concurrency"] == c and not a["batching"])
            for c in levels
        },
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
