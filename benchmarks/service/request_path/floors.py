"""The floors of benchmarks/service/request_path: bare gRPC servers, each in a process of its
own, that decode a Search request and return a canned answer — grpc.aio's (what `strata serve`
runs), the thread-pool server's, and grpc.aio's after a busy wait as long as a query. The
package's docstring says how to read them.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from service._generated.strata.v1 import search_pb2 as pb


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
