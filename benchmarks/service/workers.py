"""Serving from every core: `strata serve --workers 1` against `--workers 2`, side by side.

The bundle is request_path's: N × 512 synthetic rows (default 100,000) whose manifest names
`open_clip:ViT-B-32@random:0` (a real-size encoder with random weights: no download). Both
servers are started once, as a user starts them (`--workers 1` is one process; `--workers 2`
a parent, its forkserver and two workers), and kept; they idle while the other is measured.

1. **QPS** at each `--concurrency` C, vector queries at object and AUTO text queries (query-cache
   hits after each connection's warm-up: the path, not the encoder), C callers each on a
   connection of its own (as C clients), from two generators on the same machine:
   - **h2load** (nghttp2's, in C: benchmarks/service/h2load.py), `--seconds` a round after a
     second's warm-up; each process sends one request, so the vector arm sends H2LOAD_VECTORS
     distinct vectors and the text arm the ten texts, the connections dealt over them (at C
     below their number, the first C of them);
   - **python**: one load process of grpc channels (benchmarks/service/load.py), every caller
     cycling through all the requests for `--seconds` a round (a window, as h2load's: with a
     count of searches each, a round would last as long as its slowest caller).
   Each call is checked: the server's own count of calls by gRPC code (its /metrics, the
   parent's sum over its workers). The two servers alternate arm by arm, `--repeats` rounds;
   medians, and the ratio 2 workers / 1: of the medians (`qps_2_over_1`), and the median of
   each round's ratio (`qps_2_over_1_by_round`: within a round the two servers run moments
   apart, so a drift of the machine's speed between rounds cancels). The generator's CPU
   seconds per wall second say what it takes of the two cores, and the server's (its whole
   process tree's, over the arm's wall time, warm-up included: `server_cores`) what one
   worker can use and so how far a second can add on this machine.
2. **Memory**: PSS (`/proc/PID/smaps_rollup`: a page shared by n processes counts 1/n) of each
   server's whole process tree, after the QPS part, and what one encoder costs (the growth of
   this process's own anonymous memory when it loads one). Target: 2 workers ≤ 1.25 × 1 worker
   + one encoder.
3. **Hot swaps** with 2 workers under load (`--swaps`, default 5): a Redis of the benchmark's own,
   client threads searching, each a connection of its own, while the indexer makes and
   announces versions (`delete_rows`). Per swap: seconds from the announcement to the parent's
   `all 2 workers serve version V`; failed calls; calls that began after that line and were
   answered from an older version (a call begun before it may still be on its way back).

    python -m benchmarks.service.workers                                  # 100,000 rows
    python -m benchmarks.service.workers --rows 20000 --repeats 1 --json /tmp/workers.json
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import benchmark_parser, paired_ratio, publish
from benchmarks.service.h2load import h2load_arm, handled
from benchmarks.service.load import QUERIES
from benchmarks.service.request_path import gallery, query_vectors
from benchmarks.service.request_path.qps import qps_arm, qps_medians, qps_requests
from indexer.format.bundle import Bundle
from indexer.update.rows import DeleteConfig, delete_rows
from indexer.versions.publish import RedisPublisher
from service.api.grpc.client import StrataClient, StrataClientError
from tests.servers import RedisServer, free_port

START_S = 600.0
GENERATORS = ("h2load", "python")
H2LOAD_VECTORS = 8  # distinct vector requests h2load sends (one process each: module doc)


class Served:
    """`strata serve --workers N` in a subprocess: its target, its log lines (stderr, kept),
    and its /metrics (the parent's sum over its workers)."""

    def __init__(
        self, bundles: Path, workers: int | None, *extra: str, root: Path | None = None
    ) -> None:
        """`workers`: None for the default; `root`: the checkout whose code serves (this
        one's when None)."""
        env = {**os.environ, "STRATA_LOG_LEVEL": "INFO", "PYTHONUNBUFFERED": "1"}
        if root is not None:
            env["PYTHONPATH"] = str(root)
        self.workers = workers
        self.metrics_url = f"http://127.0.0.1:{(port := free_port())}/metrics"
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "service",
                "serve",
                "--bundles",
                str(bundles),
                "--port",
                "0",
                "--device",
                "cpu",
                *(["--workers", str(workers)] if workers is not None else []),
                "--max-wait-ms",
                "0",
                "--metrics-port",
                str(port),
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=root,
        )
        assert self.process.stdout is not None and self.process.stderr is not None
        self.log: list[str] = []
        threading.Thread(target=lambda: self.log.extend(self.process.stderr), daemon=True).start()
        line = self.process.stdout.readline()
        found = re.search(r" on (\S+:\d+);", line)
        if found is None:
            self.process.kill()
            raise RuntimeError(f"strata serve did not start: {line!r} {''.join(self.log[-5:])}")
        self.target = found.group(1)
        threading.Thread(target=lambda: [None for _ in self.process.stdout], daemon=True).start()

    def handled(self) -> dict[str, float]:
        """Search calls completed so far, by gRPC code."""
        return handled(self.metrics_url)

    def said(self, text: str) -> bool:
        return any(text in line for line in list(self.log))

    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) the server's whole process tree has used so far."""
        return cpu_seconds_of_tree(self.process.pid)

    def pss_mb(self) -> float:
        """PSS of the server's whole process tree, MiB."""
        return sum(_pss_kb(pid) for pid in _tree(self.process.pid)) / 1024

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def cpu_seconds_of_tree(root: int) -> float:
    """CPU seconds (user + system) a process and its descendants have used so far."""
    return sum(_cpu_seconds(pid) for pid in _tree(root))


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _pss_kb(pid: int, field: str = "Pss") -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    found = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) if found else 0


def encoder_mb(spec: str) -> float:
    """The anonymous memory one encoder adds to a process, MiB (loaded here, then dropped)."""
    import gc

    from training.core.encoders import load_encoder

    before = _pss_kb(os.getpid(), "Pss_Anon")
    encoder = load_encoder(spec, device="cpu")
    grown = _pss_kb(os.getpid(), "Pss_Anon") - before
    del encoder
    gc.collect()
    return grown / 1024


def qps_part(
    servers: list[Served],
    vectors: np.ndarray,
    levels: list[int],
    repeats: int,
    seconds: float,
) -> dict[str, Any]:
    """QPS of each server at each concurrency, for both generators (module doc), the arms
    interleaved round by round; medians, and the ratios 2 workers / 1."""
    kinds = qps_requests(vectors)
    h2load_requests = {"vector": kinds["vector"][:H2LOAD_VECTORS], "text": kinds["text"]}
    runs: dict[str, list[dict[str, Any]]] = {}
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as load:
        for _ in range(repeats):
            for c in levels:
                for kind, requests in kinds.items():
                    for served in servers:  # C callers, each a connection of its own
                        for generator in GENERATORS:
                            cpu, began = served.cpu_seconds(), time.perf_counter()
                            if generator == "h2load":
                                arm = h2load_arm(
                                    served.target, h2load_requests[kind], c, seconds, served.handled
                                )
                            else:
                                arm = qps_arm(load, served.target, c, 0, requests, c, seconds)
                            took = time.perf_counter() - began
                            arm["server_cores"] = (served.cpu_seconds() - cpu) / took
                            key = f"{generator} {kind} c={c} workers={served.workers}"
                            runs.setdefault(key, []).append(arm)
    summary = qps_medians(runs)
    for key, rounds in runs.items():
        cores = statistics.median(r["server_cores"] for r in rounds)
        summary[key]["server_cores"] = round(cores, 2)
        if "share_per_request" in rounds[-1]:  # h2load's mix: each request's share, last round
            summary[key]["share_per_request"] = rounds[-1]["share_per_request"]
    ratios, paired = {}, {}
    for generator in GENERATORS:
        for c in levels:
            for kind in kinds:
                keys = [f"{generator} {kind} c={c} workers={w}" for w in (1, 2)]
                one, two = (summary[key]["qps"] for key in keys)
                ratios[f"{generator} {kind} c={c}"] = round(two / one, 2)
                one_rounds, two_rounds = ([r["qps"] for r in runs[key]] for key in keys)
                paired[f"{generator} {kind} c={c}"] = round(paired_ratio(two_rounds, one_rounds), 2)
    # the ratio of the medians, and the median of each round's ratio (the two servers measured
    # side by side within a round: a drift of the machine's speed between rounds cancels)
    return {"arms": summary, "qps_2_over_1": ratios, "qps_2_over_1_by_round": paired}


def swap_part(bundles: Path, swaps: int) -> dict[str, Any]:
    """Five (`swaps`) versions announced under load to a pool of two (module docstring)."""
    with RedisServer() as redis:
        prefix = "strata-bench-workers"
        pool = Served(bundles, 2, "--redis-url", redis.url, "--redis-prefix", prefix)
        answers: list[list[int]] = [[] for _ in range(4)]
        began_at: list[list[float]] = [[] for _ in range(4)]  # when each answered call began
        failures: list[str] = []
        stop = threading.Event()

        def search(index: int) -> None:
            with StrataClient(pool.target, timeout=30) as client:
                i = 0
                while not stop.is_set():
                    began = time.perf_counter()
                    try:
                        version = client.search(QUERIES[i % 5], k=10).bundle_version
                        began_at[index].append(began)
                        answers[index].append(version)
                    except StrataClientError as exc:
                        failures.append(str(exc))
                    i += 1

        threads = [threading.Thread(target=search, args=(i,), daemon=True) for i in range(4)]
        for thread in threads:
            thread.start()
        events = []
        try:
            for row in range(swaps):
                row_id = Bundle.open(bundles).ids([row])[0]
                began = time.perf_counter()
                summary = delete_rows(
                    DeleteConfig(bundles=bundles, ids=(row_id,), verify_sample=4),
                    publisher=RedisPublisher(redis.url, prefix),
                )
                announced = time.perf_counter()
                version = int(summary.name[1:])
                done = f"all 2 workers serve version {version}"
                while not pool.said(done):
                    if time.perf_counter() - announced > START_S:
                        raise RuntimeError(f"the pool never said {done!r}")
                    time.sleep(0.01)
                swapped = time.perf_counter()
                seen = [len(a) for a in answers]
                while not all(len(a) > n + 2 for a, n in zip(answers, seen, strict=True)):
                    time.sleep(0.01)
                older = sum(  # calls that began once the pool said so, answered from before
                    1
                    for a, b in zip(answers, began_at, strict=True)
                    for v, t in zip(list(a), list(b), strict=False)  # one may be a step ahead
                    if t >= swapped and v < version
                )
                events.append(
                    {
                        "version": version,
                        "make_and_announce_s": round(announced - began, 3),
                        "announce_to_all_serving_s": round(swapped - announced, 3),
                        "older_answers_after": older,
                    }
                )
        finally:
            stop.set()
            for thread in threads:
                thread.join(60)
            pool.stop()
    moved_back = sum(1 for a in answers for x, y in itertools.pairwise(a) if y < x)
    return {
        "swaps": events,
        "calls": sum(len(a) for a in answers),
        "failed_calls": len(failures),
        "older_answers_after_done": sum(e["older_answers_after"] for e in events),
        "answers_moving_back": moved_back,
        "failures": failures[:5],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200, help="distinct query vectors")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the QPS part")
    parser.add_argument("--seconds", type=float, default=5.0, help="each QPS arm's window")
    parser.add_argument("--swaps", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path("runs/bench/request-path"))
    parser.add_argument("--json", type=Path, default=Path("runs/bench/workers.json"))
    args = parser.parse_args(argv)
    bundles = gallery(args.work, args.rows)
    vectors = query_vectors(args.queries)
    servers = [Served(bundles, 1), Served(bundles, 2)]
    try:
        levels = [int(c) for c in args.concurrency.split(",")]
        qps = qps_part(servers, vectors, levels, args.repeats, args.seconds)
        pss = {f"workers={s.workers}": round(s.pss_mb(), 1) for s in servers}
    finally:
        for served in servers:
            served.stop()
    encoder = encoder_mb(Bundle.open(bundles).manifest.encoder or "")
    one, two = pss["workers=1"], pss["workers=2"]
    copy = args.work / f"swap-bundles-{args.rows}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(bundles, copy)
    try:
        swaps = swap_part(copy, args.swaps)
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    result = {
        "benchmark": "workers",
        "rows": args.rows,
        "cores": len(os.sched_getaffinity(0)),
        "qps": qps,
        "pss_mb": pss,
        "encoder_mb": round(encoder, 1),
        "pss_2_over_1": round(two / one, 3),
        "pss_target_mb": round(1.25 * one + encoder, 1),
        "pss_within_target": two <= 1.25 * one + encoder,
        "hot_swaps": swaps,
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
