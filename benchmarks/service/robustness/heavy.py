"""The most expensive request the limits allow (service/limits.py), and what it does to everyone
else: a small query's p99 while it runs, against the small query's p99 on an idle server
(target: at most 3×).

A real server in this process over the load benchmark's gallery (100,000 synthetic rows,
MiniLM embedding the queries on the CPU), the clients in a separate process. Candidates, each
timed alone (`--repeats`, median):

- `search`: one Search at every limit at once — a 2,000-character text at the full prefix,
  top_k 1000, 32 metadata fields, 64 excluded concepts (those with the most rows);
- `explain`: the same with explain, top_k 100 (explain's limit);
- `batch`, `batch-explain`: BatchSearch of 256 (the limit) of each, every text distinct.

The slowest is the most expensive; then it runs back to back in one coroutine while another
sends small queries ("a dog" and the like, AUTO, top_k 10) one after the other, for
`--small` queries; their p99 is compared with the idle p99 of the same small queries.

    python -m benchmarks.service.robustness.heavy
    python -m benchmarks.service.robustness.heavy --rows 20000 --small 100
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from benchmarks.harness import publish
from benchmarks.service.load import QUERIES, build_gallery, set_threads
from indexer.format.bundle import Bundle
from service.api.background import BackgroundServer
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.limits import LIMITS
from training.core.encoders import load_encoder

LONG = "a black dog chasing a red ball along the wet sand of a beach at sunset while "


def heavy_request(kind: str, excluded: list[int], serial: int) -> bytes:
    """The serialized request of a candidate (texts distinct per `serial` and item)."""
    from service._generated.strata.v1 import search_pb2 as pb

    def one(i: int) -> pb.SearchRequest:
        text = f"{serial}-{i} " + LONG * 40
        explain = kind.endswith("explain")
        return pb.SearchRequest(
            query=pb.Query(text=text[: LIMITS.text_chars]),
            granularity=pb.GRANULARITY_FULL,
            top_k=LIMITS.explain_hits if explain else 1000,
            explain=explain,
            metadata_fields=["caption"] * LIMITS.metadata_fields,
            filter=pb.ConceptFilter(exclude=[pb.ConceptRef(id=c) for c in excluded]),
        )

    if kind.startswith("batch"):
        requests = [one(i) for i in range(LIMITS.batch_requests)]
        return pb.BatchSearchRequest(requests=requests).SerializeToString()
    return one(0).SerializeToString()


def drive(
    target: str, kind: str | None, excluded: list[int], small: int, heavy_repeats: int
) -> dict:
    """In the load process. `kind` None: `small` small queries alone (idle). Else with `small`
    0: `heavy_repeats` heavy requests alone, timed; with `small` > 0: heavy requests back to
    back while the small queries run."""
    import asyncio

    import grpc

    from service._generated.strata.v1 import search_pb2 as pb

    small_requests = [pb.SearchRequest(query=pb.Query(text=t), top_k=10) for t in QUERIES]

    async def run() -> dict:
        options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        async with grpc.aio.insecure_channel(target, options=options) as channel:
            search = channel.unary_unary(
                "/strata.v1.SearchService/Search",
                response_deserializer=pb.SearchResponse.FromString,
            )
            batch = channel.unary_unary(
                "/strata.v1.SearchService/BatchSearch",
                response_deserializer=pb.BatchSearchResponse.FromString,
            )
            await search(small_requests[0].SerializeToString(), timeout=60)
            heavy_times: list[float] = []
            small_times: list[float] = []
            stop = asyncio.Event()

            async def heavy_loop(count: int | None) -> None:
                call = batch if kind and kind.startswith("batch") else search
                serial = 0
                while (count is None and not stop.is_set()) or (
                    count is not None and serial < count
                ):
                    request = heavy_request(kind or "", excluded, serial)
                    began = time.perf_counter()
                    await call(request, timeout=600)
                    heavy_times.append(time.perf_counter() - began)
                    serial += 1

            async def small_loop() -> None:
                for i in range(small):
                    began = time.perf_counter()
                    request = small_requests[i % len(small_requests)]
                    await search(request.SerializeToString(), timeout=60)
                    small_times.append(time.perf_counter() - began)

            if kind is None:
                await small_loop()
            elif small == 0:
                await heavy_loop(heavy_repeats)
            else:
                heavy = asyncio.ensure_future(heavy_loop(None))
                await asyncio.sleep(0.2)  # the heavy request is under way
                await small_loop()
                stop.set()
                await heavy
        return {"heavy_s": heavy_times, "small_s": small_times}

    return asyncio.run(run())


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=300, help="small queries per measurement")
    parser.add_argument("--repeats", type=int, default=2, help="timings of each candidate")
    parser.add_argument("--threads", type=int, default=None, help="see load.set_threads")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/heavy_request.json"))
    args = parser.parse_args(argv)
    set_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="strata-heavy-") as folder:
        bundles = build_gallery(Path(folder), args.rows)
        engine = SearchEngine(Bundle.open(bundles), load_encoder("minilm", device="cpu"))
        bundle = engine.bundle
        sizes = {c: len(bundle.postings(c)[0]) for c in range(2 * bundle.dim)}
        excluded = sorted(sizes, key=lambda c: -sizes[c])[: LIMITS.concept_refs]
        spawn = multiprocessing.get_context("spawn")
        with (
            ProcessPoolExecutor(max_workers=1, mp_context=spawn) as load,
            BackgroundServer(engine, ServerConfig(port=0)) as server,
        ):

            def run(kind: str | None, small: int, repeats: int = 0) -> dict:
                return load.submit(drive, server.target, kind, excluded, small, repeats).result()

            idle = run(None, args.small)["small_s"]
            candidates = {
                kind: statistics.median(run(kind, 0, args.repeats)["heavy_s"])
                for kind in ("search", "explain", "batch", "batch-explain")
            }
            worst = max(candidates, key=candidates.__getitem__)
            single = max(("search", "explain"), key=candidates.__getitem__)
            under = {kind: run(kind, args.small) for kind in dict.fromkeys([worst, single])}
            idle_again = run(None, args.small)["small_s"]
    idle_p99 = p99(idle + idle_again)
    result = {
        "benchmark": "heavy_request",
        "rows": args.rows,
        "threads": args.threads,
        "limits": LIMITS.model_dump(),
        "excluded_concepts_rows": [sizes[c] for c in excluded],
        "candidates_s": candidates,
        "most_expensive": worst,
        "most_expensive_s": candidates[worst],
        "idle_small_p50_ms": 1000 * statistics.median(idle + idle_again),
        "idle_small_p99_ms": 1000 * idle_p99,
        "under": {
            kind: {
                "heavy_requests_run": len(measured["heavy_s"]),
                "heavy_median_s": statistics.median(measured["heavy_s"])
                if measured["heavy_s"]
                else None,
                "small_p50_ms": 1000 * statistics.median(measured["small_s"]),
                "small_p99_ms": 1000 * p99(measured["small_s"]),
                "small_p99_over_idle_p99": p99(measured["small_s"]) / idle_p99,
            }
            for kind, measured in under.items()
        },
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
