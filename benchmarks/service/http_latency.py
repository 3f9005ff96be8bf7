"""HTTP Search latency as a ratio to gRPC Search: the same query to the same server process,
one call over each transport in turn (interleaved, `benchmarks.training.interleaved`), median
of each; target ≤ 1.3×.

The server runs in its own process (`strata serve --port 0 --http-port 0`), so the client's
work does not share its interpreter. Each arm is what a client does: gRPC — a stub call with
the serialised SearchRequest, the SearchResponse parsed; HTTP — a POST of the request's JSON
on a keep-alive connection, the JSON answer parsed. The query's embedding is cached after the
warm-up call, so both arms time transport, conversion, the micro-batcher and the FAISS search:
the case where the transport's share of the latency is largest.

    python -m benchmarks.service.http_latency                  # synthetic 5,000-row gallery
    python -m benchmarks.service.http_latency --bundles runs/bundles --queries 50 --rounds 10
"""

from __future__ import annotations

import http.client
import json
import tempfile
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format

from benchmarks.harness import benchmark_parser, interleaved, publish
from service._generated.strata.v1 import search_pb2 as pb
from service._generated.strata.v1 import search_pb2_grpc

QUERIES = (
    "a dog",
    "a red car",
    "a man riding a horse",
    "two children in the snow",
    "a cat on a sofa",
    "a woman in a blue dress",
    "a bird flying over the sea",
    "people walking in a park",
)
TARGET_RATIO = 1.3


def measure(grpc_target: str, http_target: str, queries: int, rounds: int, k: int) -> dict:
    """Median seconds of each arm and the ratio HTTP / gRPC."""
    requests = [
        pb.SearchRequest(query=pb.Query(text=QUERIES[i % len(QUERIES)]), top_k=k)
        for i in range(queries)
    ]
    bodies = [json_format.MessageToJson(r).encode() for r in requests]
    host, port = http_target.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"content-type": "application/json"}
    with grpc.insecure_channel(grpc_target) as channel:
        stub = search_pb2_grpc.SearchServiceStub(channel)

        def over_grpc(i: int) -> None:
            response = stub.Search(requests[i], timeout=60)
            assert len(response.hits) == k

        def over_http(i: int) -> None:
            connection.request("POST", "/v1/search", bodies[i], headers)
            response = connection.getresponse()
            answer = json.loads(response.read())
            assert response.status == 200 and len(answer["hits"]) == k, answer

        for i in range(queries):  # embed every query once: both arms then hit the cache
            over_grpc(i)
            over_http(i)
        medians = interleaved({"grpc": over_grpc, "http": over_http}, queries, rounds)
    connection.close()
    ratio = medians["http"] / medians["grpc"]
    return {
        "grpc_median_ms": round(medians["grpc"] * 1000, 3),
        "http_median_ms": round(medians["http"] * 1000, 3),
        "ratio_http_to_grpc": round(ratio, 3),
        "target_ratio": TARGET_RATIO,
        "within_target": ratio <= TARGET_RATIO,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--bundles", type=Path, help="bundle directory to serve")
    parser.add_argument("--rows", type=int, default=5000, help="synthetic gallery rows")
    parser.add_argument("--queries", type=int, default=len(QUERIES))
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/http_latency.json"))
    args = parser.parse_args(argv)
    from tests.servers import start_server

    with tempfile.TemporaryDirectory(prefix="strata-http-latency-") as folder:
        bundles = args.bundles
        if bundles is None:
            from benchmarks.service.load import build_gallery

            bundles = build_gallery(Path(folder), args.rows, 384)
        process, grpc_target, http_target = start_server(bundles, http=True)
        assert http_target is not None
        try:
            figures = measure(grpc_target, http_target, args.queries, args.rounds, args.k)
        finally:
            process.terminate()
            process.wait(30)
    result = {
        "benchmark": "http_latency",
        "bundle": str(args.bundles) if args.bundles else f"synthetic {args.rows} × 384",
        "queries": args.queries,
        "rounds": args.rounds,
        "k": args.k,
        **figures,
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
