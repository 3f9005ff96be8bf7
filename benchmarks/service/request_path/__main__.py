"""`python -m benchmarks.service.request_path`: the latency, QPS and profile parts (the
package's docstring)."""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import grpc
import numpy as np

import benchmarks.service.request_path as package
from benchmarks.harness import benchmark_parser, interleaved_times, paired_median, publish
from benchmarks.service.load import QUERIES
from benchmarks.service.request_path import (
    CANNED,
    CANNED_BESIDE,
    CANNED_TEXTS,
    DIM,
    ENCODER,
    SERVED_PAIRS,
    TEXT,
    WAITING,
    K,
    gallery,
    query_vectors,
    vector_request,
)
from benchmarks.service.request_path.floors import start_canned
from benchmarks.service.request_path.profile import (
    AROUND,
    IN_A_LANE,
    ON_LOOP,
    batcher_us,
    stage_profile,
)
from benchmarks.service.request_path.qps import qps_part
from benchmarks.service.request_path.timeline import timeline_part
from indexer.format.bundle import Bundle
from service._generated.strata.v1 import search_pb2 as pb
from service._generated.strata.v1 import search_pb2_grpc
from service.api.grpc.requests import granularity_to_proto
from service.engine.search import SearchEngine
from service.query.cache import QueryCache
from service.results import SearchQuery
from tests.servers import start_server
from training.core.encoders import load_encoder
from training.core.metrics import prefix_vectors


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
    full_s = statistics.median(  # how long the waiting floor's answer waits
        interleaved_times({"full": lambda i: engine.search(queries["full"][i % n])}, n, 1)["full"]
    )
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
            # groups, each interleaved in itself: the arms of a group read the same index, so
            # none runs on a cache another group's larger scan has just flushed
            groups: dict[str, dict[str, Callable[[int], object]]] = {
                "object": {
                    f"bare FAISS Flat {object_length}": lambda i: bare[object_length][0].search(
                        bare[object_length][1][i : i + 1], K
                    ),
                    "in-process object": lambda i: engine.search(queries["object"][i % n]),
                    "served object": lambda i: stub.Search(requests["object"][i % n], timeout=60),
                    CANNED: lambda i: bare_grpc(requests["object"][i % n], timeout=60),
                    "bare threaded gRPC (canned answer)": lambda i: threaded_grpc(
                        requests["object"][i % n], timeout=60
                    ),
                },
                # its own group: a scan of every float32 row flushes the caches the funnel
                # of the in-process full query, timed next, would find warm
                "bare full": {
                    f"bare FAISS Flat {DIM}": lambda i: bare[DIM][0].search(
                        bare[DIM][1][i : i + 1], K
                    ),
                },
                "full": {
                    "in-process full (auto)": lambda i: engine.search(queries["full"][i % n]),
                    "served full (auto)": lambda i: stub.Search(
                        requests["full"][i % n], timeout=60
                    ),
                    WAITING: lambda i: waiting_grpc(requests["full"][i % n], timeout=60),
                },
                "text": {
                    "in-process text (auto)": lambda i: engine.search(text_queries[i % t]),
                    "served text (auto)": lambda i: stub.Search(texts[i % t], timeout=60),
                    CANNED_TEXTS: lambda i: bare_grpc(texts[i % t], timeout=60),
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
    waited = ms[WAITING] - 1000 * full_s
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
            "paired, over the canned-answer server's p50": {  # the floor timed beside it
                kind: value - ms[CANNED_BESIDE[kind]] for kind, value in added.items()
            },
            # the transport's cost when the call takes as long as a full query computes (the
            # canned answer's busy wait taken off), and full's paired figure over it
            "canned answer after the in-process full's p50, less that wait": waited,
            "full, paired, over that": added["full"] - waited,
        },
        "ratios": {
            "in-process object / bare": ms["in-process object"] / bare_ms,
            "served object / in-process object": ms["served object"] / ms["in-process object"],
            "served full / in-process full": ms["served full (auto)"]
            / ms["in-process full (auto)"],
            "served text / in-process text": ms["served text (auto)"]
            / ms["in-process text (auto)"],
            "bare gRPC + in-process object / in-process object": (
                ms[CANNED] + ms["in-process object"]
            )
            / ms["in-process object"],
            "bare threaded gRPC + in-process object / in-process object": (
                ms["bare threaded gRPC (canned answer)"] + ms["in-process object"]
            )
            / ms["in-process object"],
        },
        "full_plan": engine.search(queries["full"][0]).plan.describe(DIM),  # type: ignore[union-attr]
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = benchmark_parser(package.__doc__)
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
    handoff = {  # the first is on these queries' path (AROUND), the second is not
        ON_LOOP: batcher_us(args.profile_calls, on_loop=True),
        IN_A_LANE: batcher_us(args.profile_calls, on_loop=False),
    }
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
    timeline = timeline_part(engine, vectors, args.rounds)
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
        "timeline_ms": timeline,
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
