"""Mixed load on a real server: C concurrent callers each sending, one after the other, a Search,
an Explain or a BatchSearch of 1 to 32 queries (drawn at random, seeded), on a 3,000-row
gallery; p50, p99 and the slowest call over all calls and per kind, and every status that was
not OK (issue 29: the targets are p99 ≤ 4× p50 and max ≤ 10× p50, nothing failed).

The gallery is the load benchmark's (benchmarks/service/load.py: synthetic rows, MiniLM
embedding the queries on the CPU; every text distinct, so the encoder runs for each). Each arm
starts a server in a process of its own from a source tree — this one, and with `--baseline
TREE` another (a `git worktree` of an earlier commit) — so that before and after run side by
side in one run, alternating, on the same gallery and the same calls; the callers run in a
third process (one grpc.aio channel, C coroutines).

With `--repeats R` the arms run R rounds, and `pooled` judges each tree and concurrency on
all its rounds' calls together (R × 300 calls: a steadier p99 than one round's third-slowest).

    git worktree add --detach /tmp/strata-base dd00961
    python -m benchmarks.service.mixed_load --baseline /tmp/strata-base --repeats 3
    python -m benchmarks.service.mixed_load --concurrency 8 --calls 200
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path

from benchmarks.harness import publish
from benchmarks.service.load import QUERIES, build_gallery

REPO = Path(__file__).resolve().parents[2]
KINDS = ("search", "explain", "batch")
BATCH_MOST = 32

# the server process: only what every tree of the project has (BackgroundServer, the engine)
SERVER = """
import sys
from indexer.format.bundle import Bundle
from benchmarks.service.load import set_threads
from service.engine.search import SearchEngine
from service.api.background import BackgroundServer
from service.api.server import ServerConfig
from training.core.encoders import load_encoder

set_threads(None if sys.argv[2] == "default" else int(sys.argv[2]))
engine = SearchEngine(Bundle.open(sys.argv[1]), load_encoder("minilm", device="cpu"))
with BackgroundServer(engine, ServerConfig(port=0)) as server:
    print(server.port, flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin
"""


def plan_calls(count: int, rows: int, seed: int) -> list[tuple[str, int, int]]:
    """`count` calls, each (kind, batch size (1 but for a batch), an Explain's row)."""
    rng = random.Random(seed)
    calls = []
    for _ in range(count):
        kind = rng.choice(KINDS)
        size = rng.randint(1, BATCH_MOST) if kind == "batch" else 1
        calls.append((kind, size, rng.randrange(rows)))
    return calls


def drive_mix(
    target: str, concurrency: int, calls: list[tuple[str, int, int]], tag: str
) -> list[tuple[str, int, float, str]]:
    """In the load process: `concurrency` coroutines share `calls` (each taking the next one
    when its last is answered); (kind, size, seconds, status code) of every call. Texts are
    distinct by `tag` and call."""
    import asyncio

    import grpc

    from service._generated.strata.v1 import search_pb2 as pb
    from service._generated.strata.v1 import search_pb2_grpc

    def text(i: int, j: int = 0) -> str:
        return f"{QUERIES[(i + j) % len(QUERIES)]} {tag}-{i}-{j}"

    async def run() -> list[tuple[str, int, float, str]]:
        out: list[tuple[str, int, float, str]] = []
        async with grpc.aio.insecure_channel(target) as channel:
            stub = search_pb2_grpc.SearchServiceStub(channel)
            await stub.Search(pb.SearchRequest(query=pb.Query(text="warm up"), top_k=10))
            queue = list(enumerate(calls))[::-1]

            async def call(i: int, kind: str, size: int, row: int) -> None:
                if kind == "search":
                    await stub.Search(pb.SearchRequest(query=pb.Query(text=text(i)), top_k=10))
                elif kind == "explain":
                    query = pb.Query(text=text(i))
                    await stub.Explain(pb.ExplainRequest(query=query, row=row), timeout=120)
                else:
                    requests = [
                        pb.SearchRequest(query=pb.Query(text=text(i, j)), top_k=10)
                        for j in range(size)
                    ]
                    await stub.BatchSearch(pb.BatchSearchRequest(requests=requests), timeout=120)

            async def caller() -> None:
                while queue:
                    i, (kind, size, row) = queue.pop()
                    began = time.perf_counter()
                    try:
                        await call(i, kind, size, row)
                        code = "OK"
                    except grpc.aio.AioRpcError as exc:
                        code = exc.code().name
                    out.append((kind, size, time.perf_counter() - began, code))

            await asyncio.gather(*(caller() for _ in range(concurrency)))
        return out

    return asyncio.run(run())


def percentiles(seconds: list[float]) -> dict:
    """p50, p99 and max in ms, and the ratios the targets are stated in."""
    if not seconds:
        return {"calls": 0}
    ordered = sorted(seconds)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {
        "calls": len(ordered),
        "p50_ms": 1000 * p50,
        "p99_ms": 1000 * p99,
        "max_ms": 1000 * ordered[-1],
        "p99_over_p50": p99 / p50,
        "max_over_p50": ordered[-1] / p50,
    }


def summarize(answers: list[tuple[str, int, float, str]]) -> dict:
    ok = [a for a in answers if a[3] == "OK"]
    failed: dict[str, int] = {}
    for answer in answers:
        if answer[3] != "OK":
            failed[answer[3]] = failed.get(answer[3], 0) + 1
    return {
        **percentiles([a[2] for a in ok]),
        "failed": sum(failed.values()),
        "failed_by_code": failed,
        "by_kind": {k: percentiles([a[2] for a in ok if a[0] == k]) for k in KINDS},
        "met": None,
    }


def start_server(tree: Path, bundles: Path, threads: str) -> tuple[subprocess.Popen, str]:
    """A server process running `tree`'s code over `bundles`; it and its target."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(bundles), threads],
        cwd=tree,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.isdigit():
        process.kill()
        raise RuntimeError(f"the server from {tree} did not start (said {line!r})")
    return process, f"127.0.0.1:{line}"


def run_arm(
    tree: Path, bundles: Path, threads: str, load: Executor, concurrency: int, calls: list, tag: str
) -> list[tuple[str, int, float, str]]:
    """One arm: a server from `tree`, the calls driven at `concurrency`; every call's answer."""
    process, target = start_server(tree, bundles, threads)
    try:
        return load.submit(drive_mix, target, concurrency, calls, tag).result()
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(60)


def judged(answers: list[tuple[str, int, float, str]]) -> dict:
    """`summarize(answers)` and whether it meets the targets (module docstring)."""
    summary = summarize(answers)
    summary["met"] = (
        summary["failed"] == 0
        and summary.get("p99_over_p50", 99) <= 4
        and summary.get("max_over_p50", 99) <= 10
    )
    return summary


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--concurrency", default="8,32")
    parser.add_argument("--calls", type=int, default=300, help="calls per arm")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", default="1", help="server torch/FAISS threads, or default")
    parser.add_argument("--baseline", type=Path, default=None, help="a source tree to compare")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/mixed_load.json"))
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    trees = {"this": REPO} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    arms: list[dict] = []
    pooled: dict[tuple[str, int], list[tuple[str, int, float, str]]] = {}
    with tempfile.TemporaryDirectory(prefix="strata-mixed-") as folder:
        bundles = build_gallery(Path(folder), args.rows, 384)
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as load:
            for repeat in range(args.repeats):
                for concurrency in levels:
                    calls = plan_calls(max(args.calls, 4 * concurrency), args.rows, args.seed)
                    for name, tree in trees.items():  # side by side: the same calls
                        tag = f"{repeat}-{concurrency}"  # the same texts for both trees
                        answers = run_arm(
                            tree, bundles, args.threads, load, concurrency, calls, tag
                        )
                        pooled.setdefault((name, concurrency), []).extend(answers)
                        summary = judged(answers)
                        arms.append({"tree": name, "concurrency": concurrency} | summary)
                        print(
                            f"{name:>8} c={concurrency:<3} p50 {summary.get('p50_ms', 0):7.0f} ms"
                            f"  p99 {summary.get('p99_ms', 0):7.0f} ms"
                            f"  max {summary.get('max_ms', 0):7.0f} ms"
                            f"  failed {summary['failed']}",
                            flush=True,
                        )
    result = {
        "benchmark": "mixed_load",
        "rows": args.rows,
        "calls_per_arm": args.calls,
        "mix": f"Search, Explain, BatchSearch of 1-{BATCH_MOST}, equally likely, seed {args.seed}",
        "threads": args.threads,
        "trees": {name: str(tree) for name, tree in trees.items()},
        "targets": "p99 <= 4x p50, max <= 10x p50, nothing failed",
        "arms": arms,
        # every repeat's calls together: a p99 of 300 calls is their third-slowest, and moves
        # by ±0.4 of p50 between repeats on a shared machine
        "pooled": [
            {"tree": name, "concurrency": concurrency, "repeats": args.repeats} | judged(answers)
            for (name, concurrency), answers in pooled.items()
        ],
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
