"""The QPS part of benchmarks/service/request_path (the package's docstring), which
benchmarks/service/workers.py runs too: vector queries at object and AUTO text queries from a
load process of grpc channels (benchmarks/service/load.py), medians over rounds.
"""

from __future__ import annotations

import multiprocessing
import statistics
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from benchmarks.service.load import QUERIES, drive_load
from benchmarks.service.request_path import K, vector_request
from service._generated.strata.v1 import search_pb2 as pb
from service.api.grpc.requests import granularity_to_proto


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
