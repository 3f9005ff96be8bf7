"""CPU a served call costs, by kind, beside what encoding and transport cost on their own.

1. A bundle whose manifest names MiniLM, the encoder that ships in a pip package (so the server
   embeds texts with it): `--bundles`, e.g. the Flickr8k demo's (real embeddings under its
   own rotation), else the load benchmark's gallery (benchmarks/service/load.py: `--rows`
   synthetic rows under a random rotation, which no funnel narrows: every search scans the
   store); served by `strata serve` as a user starts it (a worker a core).
2. Calls from `--concurrency` callers at once over one channel from this process (a loaded
   server: concurrent texts share an encoder call), the kinds interleaved round by round
   (`--rounds`, `--calls` each per round):
   - `vector`: Search with a fresh raw vector (routed to full, as a vector is);
   - `text_fresh`: Search with a text never sent before (embedded by the encoder);
   - `text_cached`: Search with a text sent before (the query cache's embedding);
   - `text`: their even mix, the load the issue names (half the texts fresh);
   - `explain`: Explain of a sent text against a gallery row;
   - `batch`: BatchSearch of `--batch` fresh vectors.
   CPU per call = the server's whole process tree's user + system seconds (`/proc/PID/stat`:
   the workers' sum) over the calls of that kind, summed over the rounds.
3. The floors, in the same run:
   - **encoder**: MiniLM's batched cost per text, in this process, `--encoder-batch` fresh
     texts a call (CPU seconds of this process, every thread);
   - **canned**: the request-path benchmark's bare grpc.aio server (what `strata serve` runs;
     benchmarks/service/request_path/floors.py) answering every Search with the bytes of one
     real SearchResponse of 10 hits: transport, decoding the request and the response's
     bytes, nothing else.
4. Per kind, its CPU beside those floors: a text call's ratio to (encoder + canned) at its
   share of fresh texts, and what is neither (`other_ms`: the call less its encoding and the
   canned answer).

    python -m benchmarks.service.call_cpu --bundles runs/demo/bundles-flickr8k
    python -m benchmarks.service.call_cpu --rows 20000 --rounds 2 --json /tmp/call_cpu.json
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from benchmarks.service.load import build_gallery
from benchmarks.service.request_path.floors import start_canned
from benchmarks.service.workers import Served, cpu_seconds_of_tree
from indexer.format.bundle import Bundle

KINDS = ("vector", "text_fresh", "text_cached", "explain", "batch")
CACHED_TEXTS = 8  # the texts the cached arm cycles through (each sent before timing)
WORDS = ("dog", "bicycle", "red", "street", "child", "beach", "horse", "market", "snow", "boat")


def fresh_text(serial: int) -> str:
    """A text no call has sent before: words drawn by `serial`, the serial itself appended."""
    rng = np.random.default_rng(serial)
    return f"a {' '.join(rng.choice(WORDS, 3))} number {serial}"


class Calls:
    """One channel to a server, and the requests of every kind (fresh ones made on demand)."""

    def __init__(self, target: str, dim: int, rows: int, batch: int) -> None:
        import grpc

        from service._generated.strata.v1 import search_pb2 as pb
        from service._generated.strata.v1 import search_pb2_grpc

        self.pb = pb
        self.channel = grpc.insecure_channel(target)
        self.stub = search_pb2_grpc.SearchServiceStub(self.channel)
        self.dim, self.rows, self.batch = dim, rows, batch
        self.rng = np.random.default_rng(0)
        self.serial = 0
        self.cached = [fresh_text(3 * 10**9 + i) for i in range(CACHED_TEXTS)]
        self.turn = 0

    def _vector(self) -> Any:
        v = self.rng.standard_normal(self.dim).astype(np.float32)
        return self.pb.Query(vector=self.pb.FloatVector(values=v.tolist()))

    def _fresh(self) -> str:
        self.serial += 1
        return fresh_text(self.serial)

    def _cached(self) -> str:
        self.turn += 1
        return self.cached[self.turn % len(self.cached)]

    def request(self, kind: str) -> tuple[Any, Any]:
        """The stub's method for one call of `kind` and its request, made before timing."""
        pb = self.pb
        if kind == "vector":
            return self.stub.Search, pb.SearchRequest(query=self._vector(), top_k=10)
        if kind == "text_fresh":
            return self.stub.Search, pb.SearchRequest(query=pb.Query(text=self._fresh()), top_k=10)
        if kind == "text_cached":
            return self.stub.Search, pb.SearchRequest(query=pb.Query(text=self._cached()), top_k=10)
        if kind == "explain":
            row = int(self.rng.integers(self.rows))
            return self.stub.Explain, pb.ExplainRequest(
                query=pb.Query(text=self._cached()), row=row
            )
        if kind == "batch":
            requests = [pb.SearchRequest(query=self._vector(), top_k=10) for _ in range(self.batch)]
            return self.stub.BatchSearch, pb.BatchSearchRequest(requests=requests)
        raise ValueError(f"unknown kind {kind!r}")

    def warm(self) -> None:
        """Every cached text sent a few times (each worker's query cache holds its own), and
        one call of each kind (outside the timing)."""
        for text in self.cached * 4:
            self.stub.Search(self.pb.SearchRequest(query=self.pb.Query(text=text), top_k=10))
        for kind in KINDS:
            method, request = self.request(kind)
            method(request)

    def close(self) -> None:
        self.channel.close()


def timed_kind(
    calls: Calls, kind: str, count: int, cpu: Callable[[], float], concurrency: int
) -> tuple[float, int]:
    """(server CPU seconds, calls) of `count` calls of `kind` from `concurrency` callers at
    once, the requests made before timing."""
    made = [calls.request(kind) for _ in range(count)]
    with ThreadPoolExecutor(concurrency) as pool:
        before = cpu()
        for _ in pool.map(lambda call: call[0](call[1]), made):
            pass
        return cpu() - before, count


def encoder_per_text(spec: str, batch: int, batches: int) -> float:
    """CPU seconds per text of `spec`'s encoder in this process, `batch` fresh texts a call."""
    from training.core.encoders import load_encoder

    encoder = load_encoder(spec, device="cpu")
    encoder.encode_text([fresh_text(10**9 + i) for i in range(batch)])  # its lazy set-up
    spent = 0.0
    for b in range(batches):
        texts = [fresh_text(2 * 10**9 + b * batch + i) for i in range(batch)]
        begun = time.process_time()
        encoder.encode_text(texts)
        spent += time.process_time() - begun
    return spent / (batch * batches)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--bundles", type=Path, help="a bundle directory (MiniLM) to serve")
    parser.add_argument("--rows", type=int, default=100_000, help="else synthetic rows")
    parser.add_argument("--calls", type=int, default=100, help="calls of each kind per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8, help="callers at once")
    parser.add_argument("--batch", type=int, default=8, help="queries a BatchSearch carries")
    parser.add_argument("--encoder-batch", type=int, default=64)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/call-cpu.json"))
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="strata-call-cpu-") as tmp:
        bundles = args.bundles or build_gallery(Path(tmp), args.rows)
        manifest = Bundle.open(bundles).manifest
        if not (manifest.encoder or "").startswith("minilm"):
            raise SystemExit(f"{bundles}: its encoder is {manifest.encoder}, not MiniLM")
        rows, dim = manifest.rows, manifest.dim
        served = Served(bundles, None)  # `strata serve` as a user starts it: a worker a core
        try:
            calls = Calls(served.target, dim, rows, args.batch)
            calls.warm()
            spent = {kind: [0.0, 0] for kind in KINDS}
            for _ in range(args.rounds):
                for kind in KINDS:
                    seconds, count = timed_kind(
                        calls, kind, args.calls, served.cpu_seconds, args.concurrency
                    )
                    spent[kind][0] += seconds
                    spent[kind][1] += count
            method, request = calls.request("text_cached")
            answer = method(request).SerializeToString()
            calls.close()
        finally:
            served.stop()
    process, target = start_canned(answer)
    try:
        to_canned = Calls(target, dim, rows, args.batch)
        for _ in range(10):
            to_canned.stub.Search(to_canned.pb.SearchRequest(top_k=10))
        canned_seconds, canned_calls = 0.0, 0
        for _ in range(args.rounds):
            seconds, count = timed_kind(
                to_canned,
                "text_cached",
                args.calls,
                lambda: cpu_seconds_of_tree(process.pid),
                args.concurrency,
            )
            canned_seconds += seconds
            canned_calls += count
        to_canned.close()
    finally:
        process.terminate()
        process.join(timeout=30)
    encoder = encoder_per_text("minilm", args.encoder_batch, max(2, args.rounds))
    canned_ms = 1000 * canned_seconds / canned_calls
    encoder_ms = 1000 * encoder
    per_call = {kind: 1000 * s / n for kind, (s, n) in spent.items()}
    per_call["text"] = (per_call["text_fresh"] + per_call["text_cached"]) / 2
    fresh_share = {"text_fresh": 1.0, "text_cached": 0.0, "text": 0.5}
    kinds: dict[str, Any] = {}
    for kind, ms in per_call.items():
        entry: dict[str, Any] = {"cpu_ms": round(ms, 3), "over_canned": round(ms / canned_ms, 2)}
        if kind in fresh_share:
            floor = fresh_share[kind] * encoder_ms + canned_ms
            entry["floor_ms"] = round(floor, 3)
            entry["over_floor"] = round(ms / floor, 2)
            entry["other_ms"] = round(ms - floor, 3)
        if kind == "batch":
            entry["cpu_ms_per_query"] = round(ms / args.batch, 3)
        kinds[kind] = entry
    figures = {
        "bundles": str(args.bundles) if args.bundles else "synthetic",
        "rows": rows,
        "calls_per_kind": args.calls * args.rounds,
        "concurrency": args.concurrency,
        "batch": args.batch,
        "encoder": "minilm",
        "encoder_ms_per_text": round(encoder_ms, 3),
        "encoder_batch": args.encoder_batch,
        "canned_ms_per_call": round(canned_ms, 3),
        "kinds": kinds,
        "seconds": round(time.perf_counter() - started, 1),
    }
    for kind, entry in kinds.items():
        print(f"{kind:<12} {entry}")
    print(f"encoder {encoder_ms:.3f} ms/text (batch {args.encoder_batch}); canned {canned_ms:.3f}")
    return publish(figures, args.json)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
