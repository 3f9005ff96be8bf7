"""Load on a real server: QPS and latency percentiles at several client concurrencies, with the
encoder micro-batching on and off, side by side in one script; and the gRPC overhead at
concurrency 1 as the ratio of the service's latency to the same pipeline called in-process.

The gallery is synthetic (N clustered 384-d rows in a float16 cache, random GraSP-VL and CEDAR
artifacts, a bundle built by the indexer); the queries are real: caption-like texts embedded by
MiniLM on the server, routed by AUTO. Each arm starts its own server on a free port. The load
comes from a separate process (so the clients do not compete with the server for this
process's GIL): one grpc.aio channel with C coroutines, each sending its next search as soon as
the last one is answered, for a fixed count. Every answer is counted by status: OK,
RESOURCE_EXHAUSTED (the queue was full: admission control, service/serving/batching.py — a client
backs off `--backoff-ms` before its next search, as a retry policy would) and anything else
(a failure); QPS, p50 and p99 are of the OK answers, and the rejections' own latency is kept
apart (they must be fast). The overhead check alternates, in rounds, searches
through `SearchEngine.search` in this process with the same searches through a live server, so
that drift in a shared machine's speed falls on both sides alike; the arms run in `--repeats`
rounds for the same reason, and the batching ratios compare median QPS.

    python -m benchmarks.service.load                    # 100,000 rows, concurrency 1 … 128
    python -m benchmarks.service.load --rows 20000 --queries 64
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path

import numpy as np

from benchmarks.harness import publish
from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.format.bundle import Bundle
from service.api.background import BackgroundServer
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.results import SearchQuery
from service.serving.batching import BatchingConfig
from training.core.cache import EmbeddingCache
from training.core.encoders import load_encoder
from training.synthetic import (
    random_cedar_artifact,
    random_grasp_artifact,
    write_synthetic_cache,
)

QUERIES = (
    "a dog",
    "a red car",
    "a man riding a bicycle",
    "two children playing in the snow",
    "a black dog chasing a ball on the beach",
    "a woman in a blue dress",
    "a bird",
    "a boy jumping into a pool",
    "people walking on a busy street",
    "a white horse",
)


def set_threads(threads: int | None) -> None:
    """Intra-op threads of torch and FAISS (one OpenMP runtime) in the server's process; None
    leaves the libraries' default (all cores). On a 2-core machine shared with other jobs,
    OpenMP's spinning barriers at 2 threads made single queries up to 25× slower (7 ms → 180
    ms in-process, one check); `--threads 1` keeps a core for gRPC and the event loop."""
    if threads is None:
        return
    import faiss
    import torch

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)


def build_gallery(work: Path, rows: int, dim: int = 384) -> Path:
    """A bundle of `rows` synthetic text rows whose manifest names MiniLM (so `strata serve`
    embeds queries with it): random GraSP-VL and CEDAR (k = 32) artifacts."""
    cache = write_synthetic_cache(work / "cache", rows, dim, modality="text", encoder="minilm")
    sample = np.asarray(EmbeddingCache.open(cache).embeddings("text")[:5000], dtype=np.float32)
    random_grasp_artifact(dim).save(work / "grasp")
    random_cedar_artifact(dim, 32, sample).save(work / "cedar")
    build_bundle(
        BuildConfig(
            cache=cache,
            grasp=work / "grasp",
            cedar=work / "cedar",
            out=work / "bundles",
            progress=False,
        )
    )
    return work / "bundles"


def drive_load(
    target: str,
    concurrency: int,
    queries: int,
    backoff_ms: float = 20.0,
    requests: list[bytes] | None = None,
    connections: int = 1,
    seconds: float | None = None,
) -> tuple[list[float], float, dict[str, list[float]], float]:
    """In the load process: `concurrency` coroutines share `queries` searches over
    `connections` channels (each a TCP connection of its own: a pool's workers each take some;
    the coroutines are dealt round the channels); the OK searches' latencies, the wall time of
    them all, in seconds (each channel is connected and sends every request once first, outside
    the timing, so every worker's query cache is warm), every other status's latencies by
    code (RESOURCE_EXHAUSTED: the client waits `backoff_ms` before its next search), and the
    CPU seconds this load process spent while timed (what the generator itself costs). The
    searches cycle through `requests` (serialised SearchRequests), by default text queries
    of QUERIES with top_k 10. With `seconds`, each coroutine instead keeps searching until
    that long has passed (a closed loop over a window: a round then ends for every caller at
    once, rather than when the slowest caller has made its share)."""
    import asyncio

    import grpc

    from service._generated.strata.v1 import search_pb2 as pb
    from service._generated.strata.v1 import search_pb2_grpc

    if requests is None:
        messages = [pb.SearchRequest(query=pb.Query(text=t), top_k=10) for t in QUERIES]
    else:
        messages = [pb.SearchRequest.FromString(r) for r in requests]
    per_worker = max(1, queries // concurrency)
    others: dict[str, list[float]] = {}
    own_pool = [("grpc.use_local_subchannel_pool", 1)]

    async def run() -> tuple[list[float], float, float]:
        channels = [grpc.aio.insecure_channel(target, options=own_pool) for _ in range(connections)]
        stubs = [search_pb2_grpc.SearchServiceStub(channel) for channel in channels]
        for stub in stubs:  # connect and warm (each text into each worker's cache)
            for message in messages[: len(QUERIES)]:
                await stub.Search(message, timeout=60)

        async def worker(index: int) -> list[float]:
            stub = stubs[index % len(stubs)]
            own = []
            i = 0
            while (i < per_worker) if deadline is None else (time.perf_counter() < deadline):
                message = messages[(index + i) % len(messages)]
                i += 1
                started = time.perf_counter()
                try:
                    await stub.Search(message, timeout=60)
                except grpc.aio.AioRpcError as exc:
                    others.setdefault(exc.code().name, []).append(time.perf_counter() - started)
                    if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        await asyncio.sleep(backoff_ms / 1000)
                    continue
                own.append(time.perf_counter() - started)
            return own

        cpu, started = time.process_time(), time.perf_counter()
        deadline = None if seconds is None else started + seconds
        done = await asyncio.gather(*(worker(i) for i in range(concurrency)))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        for channel in channels:
            await channel.close()
        return [latency for own in done for latency in own], elapsed, cpu

    latencies, elapsed, cpu = asyncio.run(run())
    return latencies, elapsed, others, cpu


def run_arm(
    engine: SearchEngine,
    batching: bool,
    concurrency: int,
    queries: int,
    load: Executor,
    max_wait_ms: float = BatchingConfig().max_wait_ms,
) -> dict:
    """A server with batching on or off; the load process drives it; QPS over the arm."""
    config = ServerConfig(
        port=0, batching=BatchingConfig(enabled=batching, max_wait_ms=max_wait_ms)
    )
    with BackgroundServer(engine, config) as server:
        latencies, elapsed, others, _ = load.submit(
            drive_load, server.target, concurrency, queries
        ).result()
    return {
        "batching": batching,
        "concurrency": concurrency,
        **_summary(latencies, elapsed),
        **_others(others),
    }


def in_process_latencies(engine: SearchEngine, queries: int) -> list[float]:
    """The same searches through `SearchEngine.search` in this process, one at a time."""
    engine.search(SearchQuery.of(QUERIES[0], k=10))
    latencies = []
    for i in range(queries):
        begun = time.perf_counter()
        engine.search(SearchQuery.of(QUERIES[i % len(QUERIES)], k=10))
        latencies.append(time.perf_counter() - begun)
    return latencies


def measure_overhead(
    engine: SearchEngine, load: Executor, queries: int, rounds: int, max_wait_ms: float
) -> dict:
    """Served vs in-process latency at concurrency 1, interleaved: `rounds` times, a share of
    the searches in this process, then as many through one live server (batching on) from the
    load process, so that drift in the machine's speed falls on both sides alike."""
    per_round = max(1, queries // rounds)
    config = ServerConfig(port=0, batching=BatchingConfig(max_wait_ms=max_wait_ms))
    local: list[float] = []
    served: list[float] = []
    with BackgroundServer(engine, config) as server:
        for _ in range(rounds):
            local += in_process_latencies(engine, per_round)
            served += load.submit(drive_load, server.target, 1, per_round).result()[0]
    local_p50, served_p50 = statistics.median(local), statistics.median(served)
    return {
        "rounds": rounds,
        "queries_per_side": len(local),
        "in_process_p50_ms": 1000 * local_p50,
        "served_p50_ms": 1000 * served_p50,
        "p50_ratio_served_over_in_process": served_p50 / local_p50,
    }


def median_qps(arms: list[dict], concurrency: int, batching: bool) -> float:
    """The median QPS over the repeats of one arm."""
    return statistics.median(
        a["qps"] for a in arms if a["concurrency"] == concurrency and a["batching"] == batching
    )


def _p(ordered: list[float], q: float) -> float:
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(latencies: list[float], elapsed: float) -> dict:
    ordered = sorted(latencies)
    return {
        "queries": len(ordered),
        "qps": len(ordered) / elapsed,
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": _p(ordered, 0.99),
    }


def _others(others: dict[str, list[float]]) -> dict:
    """The answers that were not OK: rejected (RESOURCE_EXHAUSTED) with their latency, and
    failed (any other code) by code."""
    rejected = sorted(others.get("RESOURCE_EXHAUSTED", []))
    failed = {code: len(v) for code, v in others.items() if code != "RESOURCE_EXHAUSTED"}
    out: dict = {
        "rejected": len(rejected),
        "failed": sum(failed.values()),
        "failed_by_code": failed,
    }
    if rejected:
        out |= {"rejected_p50_ms": 1000 * statistics.median(rejected)}
        out |= {"rejected_p99_ms": _p(rejected, 0.99)}
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=256, help="searches per arm")
    parser.add_argument("--concurrency", default="1,8,32,128")
    parser.add_argument(
        "--repeats", type=int, default=3, help="rounds of every arm; ratios use the median QPS"
    )
    parser.add_argument(
        "--max-wait-ms",
        type=float,
        default=BatchingConfig().max_wait_ms,
        help="the batcher's wait for company (service/serving/batching.py)",
    )
    parser.add_argument(
        "--overhead-queries", type=int, default=300, help="searches per side of the overhead check"
    )
    parser.add_argument(
        "--overhead-rounds", type=int, default=10, help="alternations of the two sides"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch/FAISS threads of the server (see set_threads)",
    )
    parser.add_argument("--json", type=Path, default=Path("runs/bench/service_load.json"))
    args = parser.parse_args(argv)
    set_threads(args.threads)
    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory(prefix="strata-load-") as folder:
        bundles = build_gallery(Path(folder), args.rows, 384)
        engine = SearchEngine(Bundle.open(bundles), load_encoder("minilm", device="cpu"))
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as load:
            arms = [
                {"repeat": repeat}
                | run_arm(
                    engine,
                    batching,
                    concurrency,
                    max(args.queries, 4 * concurrency),
                    load,
                    args.max_wait_ms,
                )
                for repeat in range(args.repeats)
                for concurrency in levels
                for batching in (True, False)  # side by side, alternating
            ]
            overhead = measure_overhead(
                engine, load, args.overhead_queries, args.overhead_rounds, args.max_wait_ms
            )
    result = {
        "benchmark": "service_load",
        "rows": args.rows,
        "encoder": "minilm (cpu)",
        "max_wait_ms": args.max_wait_ms,
        "threads": args.threads,
        "arms": arms,
        "median_qps": {
            f"{c} {'on' if on else 'off'}": median_qps(arms, c, on)
            for c in levels
            for on in (True, False)
        },
        "served_with_batching": {
            str(c): {
                key: statistics.median(
                    a[key] for a in arms if a["concurrency"] == c and a["batching"]
                )
                for key in ("qps", "p50_ms", "p99_ms", "rejected", "failed")
            }
            | {
                "rejected_p99_ms": max(
                    (a.get("rejected_p99_ms", 0.0) for a in arms if a["concurrency"] == c),
                    default=0.0,
                )
            }
            for c in levels
        },
        "failed_in_all_arms": sum(a["failed"] for a in arms),
        "qps_ratio_batching_on_over_off": {
            str(c): median_qps(arms, c, True) / median_qps(arms, c, False) for c in levels
        },
        "overhead_at_concurrency_1": overhead,
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
