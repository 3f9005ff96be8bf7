"""Cheap queries beside dear ones, at one caller: raw-vector queries at object (a fraction of a
millisecond) alone and alternating with full ones (a funnel, milliseconds), on the request_path
bundle (N × 512 synthetic rows, benchmarks/service/request_path).

A lone query with no encoder call runs on the server's event loop while lone queries of its
kind have lately cost at most `BatchingConfig.inline_ms`, else in a lane (service/serving/
batching.py). Two parts:

1. **Where each ran**: a server in a process of its own (`BackgroundServer`; this script run
   on each checkout's code), its engine noting the thread of each search; `--calls`
   object/full pairs one after another (after a warm round): the share of each kind that ran
   on the event loop. Then the same with AUTO texts the query cache holds, an object phrase
   and a scene description alternating (TEXT_PAIR; the server's own encoder, its cache local):
   a text's kind is the granularity its route picks, so each is judged by its own cost.
2. **Latency**: `strata serve --workers 1` from this checkout and, with `--compare CHECKOUT`,
   from another, one gRPC channel each, calls alternated server by server (which goes first
   alternating from call to call); object queries
   alone, then object and full alternating; `--rounds` rounds, median ms of each arm, and the
   paired median (harness.paired_median) of this checkout's calls less the other's.

    python -m benchmarks.service.inline_kinds                 # runs/bench/inline_kinds.json
    python -m benchmarks.service.inline_kinds --compare CHECKOUT
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import benchmark_parser, paired_median, publish

ARMS = ("object alone", "object beside full", "full beside object")
TEXT_PAIR = ("a dog", "a black dog chasing a ball on the beach")  # AUTO: object, caption


async def thread_name() -> str:
    return threading.current_thread().name


def placement(bundles: Path, calls: int, texts: bool = False) -> dict[str, float]:
    """Part 1: the share of object and of full queries that ran on the event loop; with
    `texts`, of TEXT_PAIR's object phrase and scene description."""
    import grpc

    from benchmarks.service.request_path import query_vectors, vector_request
    from indexer.format.bundle import Bundle
    from service._generated.strata.v1 import search_pb2 as pb
    from service._generated.strata.v1 import search_pb2_grpc
    from service.api.background import BackgroundServer
    from service.api.grpc.requests import granularity_to_proto
    from service.api.server import ServerConfig
    from service.engine.search import SearchEngine
    from service.query.cache import QueryCache

    threads: list[str] = []

    class Noting(SearchEngine):
        def search_batch(self, queries: Sequence[Any], observer: Any = None) -> Any:
            threads.append(threading.current_thread().name)
            return super().search_batch(queries, observer)

    if texts:
        engine = Noting.open(bundles, device="cpu", cache=QueryCache(), verify=False)
        pair = tuple(pb.SearchRequest(query=pb.Query(text=t), top_k=10) for t in TEXT_PAIR)
        pairs, labels = [pair] * calls, ("object text", "scene text")
    else:
        engine = Noting(Bundle.open(bundles), None)
        pairs = [
            (
                vector_request(v, granularity_to_proto("object")),
                vector_request(v, granularity_to_proto("full")),
            )
            for v in query_vectors(calls)
        ]
        labels = ("object", "full")
    with BackgroundServer(engine, ServerConfig(port=0)) as background:
        loop_thread = asyncio.run_coroutine_threadsafe(thread_name(), background.loop).result(30)
        with grpc.insecure_channel(background.target) as channel:
            stub = search_pb2_grpc.SearchServiceStub(channel)
            for pair in pairs[:3]:  # warm: each kind measured once (each text cached)
                for request in pair:
                    stub.Search(request, timeout=60)
            threads.clear()
            for pair in pairs:
                for request in pair:
                    stub.Search(request, timeout=60)
    on_loop = [name == loop_thread for name in threads]
    return {
        f"{labels[0]} on the loop": statistics.mean(on_loop[0::2]),
        f"{labels[1]} on the loop": statistics.mean(on_loop[1::2]),
    }


def placement_of(root: Path | None, bundles: Path, calls: int) -> dict[str, float]:
    """`placement` run on checkout `root`'s code (this one's where None), in a process of its
    own: this file run as a script under that checkout's PYTHONPATH."""
    code = root if root is not None else Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(code)}
    command = [sys.executable, __file__, "--placement", "--bundles", str(bundles)]
    done = subprocess.run(
        [*command, "--calls", str(calls)],
        env=env,
        cwd=code,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def latency(bundles: Path, arms: dict[str, Path | None], calls: int, rounds: int) -> dict[str, Any]:
    """Part 2: ms of every call of each ARM on each checkout's server, alternated."""
    import grpc

    from benchmarks.service.request_path import query_vectors, vector_request
    from service._generated.strata.v1 import search_pb2_grpc
    from service.api.grpc.requests import granularity_to_proto
    from tests.servers import start_server

    vectors = query_vectors(calls)
    objects = [vector_request(v, granularity_to_proto("object")) for v in vectors]
    fulls = [vector_request(v, granularity_to_proto("full")) for v in vectors]
    servers = {
        name: start_server(bundles, extra=("--workers", "1"), root=root)
        for name, root in arms.items()
    }
    times: dict[str, dict[str, list[float]]] = {name: {arm: [] for arm in ARMS} for name in arms}
    try:
        channels = {name: grpc.insecure_channel(target) for name, (_, target, _) in servers.items()}
        stubs = {name: search_pb2_grpc.SearchServiceStub(c) for name, c in channels.items()}

        def call(name: str, request: Any) -> float:
            started = time.perf_counter()
            stubs[name].Search(request, timeout=60)
            return 1e3 * (time.perf_counter() - started)

        for name in stubs:  # warm: each kind measured once
            for request in [*objects[:3], *fulls[:3]]:
                call(name, request)
        names = list(stubs)
        for _ in range(rounds):
            # which server goes first alternates call by call: both map the same files, so the
            # second to read the same rows finds them warm
            for j, request in enumerate(objects):
                for name in names[:: 1 if j % 2 else -1]:
                    times[name]["object alone"].append(call(name, request))
            for j, (obj, full) in enumerate(zip(objects, fulls, strict=True)):
                for name in names[:: 1 if j % 2 else -1]:
                    times[name]["object beside full"].append(call(name, obj))
                    times[name]["full beside object"].append(call(name, full))
        for channel in channels.values():
            channel.close()
    finally:
        for process, _, _ in servers.values():
            process.terminate()
            process.wait(timeout=60)
    out: dict[str, Any] = {
        "p50_ms": {
            name: {arm: round(statistics.median(t), 3) for arm, t in arms_times.items()}
            for name, arms_times in times.items()
        }
    }
    if len(arms) == 2:
        this, other = arms
        out[f"{this} − {other}, paired median ms"] = {
            arm: round(paired_median(times[this][arm], times[other][arm]), 3) for arm in ARMS
        }
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=100, help="queries of each kind a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", type=Path, help="another checkout, served alike")
    parser.add_argument("--work", type=Path, default=Path("runs/bench/request-path"))
    parser.add_argument("--json", type=Path, default=Path("runs/bench/inline_kinds.json"))
    parser.add_argument("--placement", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bundles", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.placement:  # placement_of's process: part 1 alone, on this interpreter's code
        shares = placement(args.bundles, args.calls) | placement(args.bundles, args.calls, True)
        print(json.dumps(shares))
        return shares
    from benchmarks.service.request_path import gallery

    bundles = gallery(args.work, args.rows).resolve()
    arms: dict[str, Path | None] = {"this checkout": None}
    if args.compare:
        arms[f"compare {args.compare}"] = args.compare.resolve()
    result = {
        "benchmark": "inline_kinds",
        "rows": args.rows,
        "calls": args.calls,
        "rounds": args.rounds,
        "placement": {name: placement_of(root, bundles, args.calls) for name, root in arms.items()},
        "latency": latency(bundles, arms, args.calls, args.rounds),
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
