"""The path around the search: bare FAISS, `SearchEngine.search` and the real `strata serve`,
interleaved in one run, with one FAISS thread; served QPS at several concurrencies; and where
one served query's time goes, stage by stage.

The bundle: N × 512 synthetic clustered rows (default 100,000; benchmarks/indexer/synthetic.py)
in a float16 cache whose manifest names `open_clip:ViT-B-32@random:0` (a 512-d text tower with
random weights: no download), random GraSP-VL and CEDAR artifacts, every prefix Flat; built
once into `--work` and reused (so a before and an after run search the same rows).

1. Latency, single queries, k = 10, in three groups, the arms of each timed one after another
   for every query (`benchmarks.training.interleaved`; a group's arms read the same index, so
   none runs on a CPU cache another group's larger scan has just flushed). object: the bundle's
   own FAISS Flat index at the object prefix (32 dims), searched directly with a prefix
   already cut and normalised; `SearchEngine.search` with a raw vector at object; the same
   through `strata serve` (a subprocess, OMP_NUM_THREADS=1) from one gRPC client in this
   process; and the floor of any Python gRPC server: a bare grpc.aio server in a process of
   its own that decodes the request and returns a canned 10-hit answer, and the same on
   grpc's thread-pool server (one worker), the other server Python's gRPC offers. full: the
   Flat index at 512, and the engine and the server at full (plan auto: the funnel the engine
   calibrated). text: AUTO text queries in-process and served (after a warm round every text
   is a query-cache hit, so what is timed is the path, not the encoder). Ratios: in-process /
   bare at 32, served / in-process for each kind. What serving adds, for object, full and
   text: the median of the per-call differences served − in-process (each served call is
   the same query as the in-process call just before it: `harness.paired_median`), beside
   the difference of the two p50s, and the paired figure less the canned-answer server's p50
   (the target's measure). The full group has one more floor: the grpc.aio canned server
   answering after as long a busy wait on its event loop as an in-process full query takes
   (its p50, measured first), less that wait: what the transport costs when the client has
   waited that long (a thread woken after milliseconds asleep answers later than one woken
   at once). The text mix's costs fall in groups by the granularity AUTO picks,
   and its p50 lies between two of them, so the difference of the p50s moves by a group's
   width from run to run; the paired median does not.
2. QPS at each `--concurrency` (C coroutines over one channel in a separate process, the
   machinery of benchmarks/service/load.py), vector queries at object and AUTO text queries,
   the two kinds alternated, `--repeats` rounds; medians.
3. The profile of one served vector query (object) and one served text query: each stage of
   the server's path called alone on that query's own values, `--profile-calls` times, median
   µs — decode (the request's bytes to a message), conversion (message to SearchQuery), checks,
   routing, embedding (the vector normalised, or the text's cache look-up), rotation, search
   (FAISS and the plan), hits, the result, the response (message and bytes), the batcher
   hand-off (submit to result through an idle MicroBatcher and its executor thread, nothing
   computed) and the metrics recorded per query; `rest` is what serving adds (the paired
   median of served − in-process) minus the stages outside the engine (decode, conversion,
   response, metrics, hand-off): gRPC's transport and interceptors, and the client.

    python -m benchmarks.service.request_path                      # 100,000 rows
    python -m benchmarks.service.request_path --rows 20000 --queries 100 --json /tmp/rp.json
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import faiss
import grpc
import numpy as np

from benchmarks.harness import benchmark_parser, interleaved_times, paired_median, publish
from benchmarks.indexer.synthetic import (
    cluster_centres,
    clustered_rows,
    random_cedar_artifact,
    random_grasp_artifact,
    write_synthetic_cache,
)
from benchmarks.service.load import QUERIES, drive_load
from benchmarks.service.request_profile import AROUND, handoff_us, stage_profile
from benchmarks.service.robustness.fuzz import start_server
from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.format.bundle import Bundle
from service._generated.strata.v1 import search_pb2 as pb
from service._generated.strata.v1 import search_pb2_grpc
from service.api.grpc.requests import granularity_to_proto
from service.engine.search import SearchEngine
from service.query.cache import QueryCache
from service.results import SearchQuery
from training.core.cache import EmbeddingCache
from training.core.encoders import load_encoder
from training.core.metrics import prefix_vectors

ENCODER = "open_clip:ViT-B-32@random:0"
DIM = 512
K = 10
TEXT = "a dog"  # the profiled text query (AUTO: object)
WAITING = "bare gRPC (canned answer after the in-process full's p50)"
SERVED_PAIRS = {  # each kind's served arm and in-process arm
    "object": ("served object", "in-process object"),
    "full": ("served full (auto)", "in-process full (auto)"),
    "text": ("served text (auto)", "in-process text (auto)"),
}


def gallery(work: Path, rows: int) -> Path:
    """The BUNDLES folder of `rows` synthetic 512-d rows (module docstring), built once."""
    out = work / f"bundles-{rows}"
    if (out / "CURRENT").exists():
        return out
    cache = write_synthetic_cache(work / f"cache-{rows}", rows, DIM, encoder=ENCODER)
    sample = np.asarray(EmbeddingCache.open(cache).embeddings("image")[:5000], dtype=np.float32)
    random_grasp_artifact(DIM).save(work / "grasp", overwrite=True)
    random_cedar_artifact(DIM, 32, sample).save(work / "cedar", overwrite=True)
    build_bundle(BuildConfig(cache=cache, grasp=work / "grasp", cedar=work / "cedar", out=out))
    return out


def query_vectors(count: int, seed: int = 7) -> np.ndarray:
    """Fresh rows of the gallery's distribution (another seed than the gallery's shards)."""
    rows, _ = clustered_rows(cluster_centres(64, DIM, 0), count, seed=seed)
    return rows


def vector_request(vector: np.ndarray, granularity: int) -> pb.SearchRequest:
    return pb.SearchRequest(
        query=pb.Query(vector=pb.FloatVector(values=vector.tolist())),
        granularity=granularity,
        top_k=K,
    )


def latency_part(
    engine: SearchEngine, stub: Any, vectors: np.ndarray, rounds: int
) -> dict[str, Any]:
    """Part 1: median ms of every arm, interleaved, and the ratios."""
    bundle = engine.bundle
    rotated = bundle.rotate(vectors)
    object_length = bundle.contract["object"]
    bare = {n: (bundle.index(n), prefix_vectors(rotated, n)) for n in (object_length, DIM)}
    queries = {
        g: [SearchQuery.of(vector=v, granularity=g, k=K) for v in vectors]
        for g in ("object", "full")
    }
    requests = {
        g: [vector_request(v, granularity_to_proto(g)) for v in vectors] for g in ("object", "full")
    }
    texts = [pb.SearchRequest(query=pb.Query(text=t), top_k=K) for t in QUERIES]
    text_queries = [SearchQuery.of(t, k=K) for t in QUERIES]
    for message, query in zip(texts, text_queries, strict=True):  # every text into the caches
        stub.Search(message, timeout=60)
        engine.search(query)
    canned = stub.Search(requests["object"][0], timeout=60).SerializeToString()
    n, t = len(vectors), len(texts)
    full_s = statistics.median(timed(lambda i: engine.search(queries["full"][i % n]), n))
    floors = [
        start_canned(canned),
        start_canned(canned, threaded=True),
        start_canned(canned, wait_s=full_s),
    ]
    try:
        with (
            grpc.insecure_channel(floors[0][1]) as channel,
            grpc.insecure_channel(floors[1][1]) as threaded_channel,
            grpc.insecure_channel(floors[2][1]) as waiting_channel,
        ):
            bare_grpc, threaded_grpc, waiting_grpc = (
                c.unary_unary(
                    "/strata.v1.SearchService/Search",
                    request_serializer=pb.SearchRequest.SerializeToString,
                    response_deserializer=pb.SearchResponse.FromString,
                )
                for c in (channel, threaded_channel, waiting_channel)
            )
            # three groups, each interleaved in itself: the arms of a group read the same
            # index, so none runs on a cache another group's larger scan has just flushed
            groups: dict[str, dict[str, Callable[[int], object]]] = {
                "object": {
                    f"bare FAISS Flat {object_length}": lambda i: bare[object_length][0].search(
                        bare[object_length][1][i : i + 1], K
                    ),
                    "in-process object": lambda i: engine.search(queries["object"][i % n]),
                    "served object": lambda i: stub.Search(requests["object"][i % n], timeout=60),
                    "bare gRPC (canned answer)": lambda i: bare_grpc(
                        requests["object"][i % n], timeout=60
                    ),
                    "bare threaded gRPC (canned answer)": lambda i: threaded_grpc(
                        requests["object"][i % n], timeout=60
                    ),
                },
                "full": {
                    f"bare FAISS Flat {DIM}": lambda i: bare[DIM][0].search(
                        bare[DIM][1][i : i + 1], K
                    ),
                    "in-process full (auto)": lambda i: engine.search(queries["full"][i % n]),
                    "served full (auto)": lambda i: stub.Search(
                        requests["full"][i % n], timeout=60
                    ),
                    WAITING: lambda i: waiting_grpc(requests["full"][i % n], timeout=60),
                },
                "text": {
                    "in-process text (auto)": lambda i: engine.search(text_queries[i % t]),
                    "served text (auto)": lambda i: stub.Search(texts[i % t], timeout=60),
                },
            }
            times = {
                name: seconds
                for arms in groups.values()
                for name, seconds in interleaved_times(arms, n, rounds).items()
            }
            ms = {name: 1000 * statistics.median(seconds) for name, seconds in times.items()}
    finally:
        for floor, _ in floors:
            floor.terminate()
            floor.join(30)
    bare_ms = ms[f"bare FAISS Flat {object_length}"]
    canned = ms["bare gRPC (canned answer)"]
    added = {  # what serving adds to the same query, call by call (harness.paired_median)
        kind: 1000 * paired_median(times[served], times[local])
        for kind, (served, local) in SERVED_PAIRS.items()
    }
    return {
        "p50_ms": ms,
        "served_minus_in_process_ms": {
            "p50 of the differences (paired)": added,
            "difference of the p50s": {
                kind: ms[served] - ms[local] for kind, (served, local) in SERVED_PAIRS.items()
            },
            "paired, over the canned-answer server's p50": {
                kind: value - canned for kind, value in added.items()
            },
            # the transport's cost when the call takes as long as a full query computes (the
            # canned answer's busy wait taken off), and full's paired figure over it
            "canned answer after the in-process full's p50, less that wait": (
                ms[WAITING] - 1000 * full_s
            ),
            "full, paired, over that": added["full"] - (ms[WAITING] - 1000 * full_s),
        },
        "ratios": {
            "in-process object / bare": ms["in-process object"] / bare_ms,
            "served object / in-process object": ms["served object"] / ms["in-process object"],
            "served full / in-process full": ms["served full (auto)"]
            / ms["in-process full (auto)"],
            "served text / in-process text": ms["served text (auto)"]
            / ms["in-process text (auto)"],
            "bare gRPC + in-process object / in-process object": (
                ms["bare gRPC (canned answer)"] + ms["in-process object"]
            )
            / ms["in-process object"],
            "bare threaded gRPC + in-process object / in-process object": (
                ms["bare threaded gRPC (canned answer)"] + ms["in-process object"]
            )
            / ms["in-process object"],
        },
        "full_plan": engine.search(queries["full"][0]).plan.describe(DIM),  # type: ignore[union-attr]
    }


def timed(call: Callable[[int], object], count: int) -> list[float]:
    """Seconds of `call(i)` for i in range(count), after one call to warm."""
    call(0)
    seconds = []
    for i in range(count):
        started = time.perf_counter()
        call(i)
        seconds.append(time.perf_counter() - started)
    return seconds


def canned_handler(answer: bytes, wait_s: float = 0.0) -> grpc.GenericRpcHandler:
    """Search that decodes the request and returns `answer`'s bytes, nothing else (after
    `wait_s` of work, on grpc.aio's server: a call that takes as long as a query)."""

    def search(request: pb.SearchRequest, context: object) -> bytes:
        return answer

    async def search_after_wait(request: pb.SearchRequest, context: object) -> bytes:
        until = time.perf_counter() + wait_s
        while time.perf_counter() < until:  # busy, as a server computing; a sleep's timer
            pass  # would round up to the event loop's millisecond
        return answer

    return grpc.method_handlers_generic_handler(
        "strata.v1.SearchService",
        {
            "Search": grpc.unary_unary_rpc_method_handler(
                search_after_wait if wait_s else search,
                request_deserializer=pb.SearchRequest.FromString,
                response_serializer=lambda b: b,
            )
        },
    )


def serve_canned(answer: bytes, ports: Any, threaded: bool, wait_s: float = 0.0) -> None:
    """In its own process: a bare gRPC server (no interceptors, no servicer) answering with
    `canned_handler`, the least a Python gRPC server costs: grpc.aio's (what `strata serve`
    runs) or, `threaded`, the thread-pool server's; `wait_s`: grpc.aio's, answering after
    that long busy."""
    if threaded:
        server = grpc.server(ThreadPoolExecutor(max_workers=1))
        server.add_generic_rpc_handlers((canned_handler(answer),))
        ports.put(server.add_insecure_port("127.0.0.1:0"))
        server.start()
        server.wait_for_termination()
        return

    async def run() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((canned_handler(answer, wait_s),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        ports.put(port)
        await server.wait_for_termination()

    asyncio.run(run())


def start_canned(
    answer: bytes, threaded: bool = False, wait_s: float = 0.0
) -> tuple[multiprocessing.process.BaseProcess, str]:
    spawn = multiprocessing.get_context("spawn")
    ports = spawn.Queue()
    process = spawn.Process(
        target=serve_canned, args=(answer, ports, threaded, wait_s), daemon=True
    )
    process.start()
    return process, f"127.0.0.1:{ports.get(timeout=120)}"


def qps_requests(vectors: np.ndarray) -> dict[str, list[bytes]]:
    """The QPS part's requests, serialised: vector queries at object, AUTO text queries."""
    object_code = granularity_to_proto("object")
    return {
        "vector": [vector_request(v, object_code).SerializeToString() for v in vectors],
        "text": [
            pb.SearchRequest(query=pb.Query(text=t), top_k=K).SerializeToString() for t in QUERIES
        ],
    }


def qps_arm(
    load: ProcessPoolExecutor,
    target: str,
    concurrency: int,
    queries: int,
    requests: list[bytes],
    connections: int = 1,
    seconds: float | None = None,
) -> dict[str, float]:
    """One arm of the load process (benchmarks/service/load.py): QPS, p50, failed calls, and
    the cores the load process itself took; with `seconds`, over a window of that length
    rather than a count of searches."""
    count = max(queries, 8 * concurrency)
    latencies, elapsed, others, cpu = load.submit(
        drive_load, target, concurrency, count, 20.0, requests, connections, seconds
    ).result()
    return {
        "qps": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "failed": sum(len(v) for v in others.values()),
        "generator_cores": cpu / elapsed,
    }


def qps_medians(runs: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, Any]]:
    """Each arm's rounds: medians, QPS per round, failed calls in all."""
    return {
        key: {
            "qps": round(statistics.median(r["qps"] for r in rs), 1),
            "p50_ms": round(statistics.median(r["p50_ms"] for r in rs), 3),
            "qps_per_round": [round(r["qps"], 1) for r in rs],
            "failed": sum(int(r["failed"]) for r in rs),
            "generator_cores": round(statistics.median(r["generator_cores"] for r in rs), 2),
        }
        for key, rs in runs.items()
    }


def qps_part(
    target: str, vectors: np.ndarray, levels: list[int], queries: int, repeats: int
) -> dict[str, Any]:
    """Part 2: median QPS of vector (object) and text (AUTO) queries at each concurrency."""
    kinds = qps_requests(vectors)
    runs: dict[str, list[dict[str, float]]] = {}
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as load:
        for _ in range(repeats):
            for c in levels:
                for kind, requests in kinds.items():
                    arm = qps_arm(load, target, c, queries, requests)
                    runs.setdefault(f"{kind} {c}", []).append(arm)
    return qps_medians(runs)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200, help="distinct query vectors")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the latency part")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--qps-queries", type=int, default=600, help="searches per QPS arm")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the QPS part")
    parser.add_argument("--profile-calls", type=int, default=2000)
    parser.add_argument("--work", type=Path, default=Path("runs/bench/request-path"))
    parser.add_argument("--json", type=Path, default=Path("runs/bench/request_path.json"))
    args = parser.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = "1"  # the served process too
    faiss.omp_set_num_threads(1)
    bundles = gallery(args.work, args.rows)
    encoder = load_encoder(ENCODER, device="cpu")
    import torch

    torch.set_num_threads(1)
    engine = SearchEngine(Bundle.open(bundles), encoder, cache=QueryCache())
    vectors = query_vectors(args.queries)
    server, target, _ = start_server(bundles)
    try:
        with grpc.insecure_channel(target) as channel:
            stub = search_pb2_grpc.SearchServiceStub(channel)
            latency = latency_part(engine, stub, vectors, args.rounds)
        levels = [int(c) for c in args.concurrency.split(",")]
        qps = qps_part(target, vectors, levels, args.qps_queries, args.repeats)
    finally:
        server.terminate()
        server.wait(timeout=60)
    engine.search(SearchQuery.of(TEXT, k=K))  # the text into the in-process cache
    handoff = handoff_us(args.profile_calls)
    object_code = granularity_to_proto("object")
    profile = {
        "vector (object)": stage_profile(
            engine, vector_request(vectors[0], object_code), args.profile_calls, handoff
        ),
        "text (auto)": stage_profile(
            engine,
            pb.SearchRequest(query=pb.Query(text=TEXT), top_k=K),
            args.profile_calls,
            handoff,
        ),
    }
    added = latency["served_minus_in_process_ms"]["p50 of the differences (paired)"]
    for stages, kind in zip(profile.values(), ("object", "text"), strict=True):
        around = sum(v for k, v in stages.items() if k in AROUND)
        stages["rest (gRPC transport, interceptors, client)"] = 1000 * added[kind] - around
    result = {
        "benchmark": "request_path",
        "rows": args.rows,
        "dim": DIM,
        "k": K,
        "threads": 1,
        "queries": args.queries,
        "rounds": args.rounds,
        "latency": latency,
        "qps": qps,
        "profile_us": profile,
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
