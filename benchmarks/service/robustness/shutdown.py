"""Exit time after SIGTERM with the largest allowed request in flight, against `--grace`.

A real `strata serve` process (`--grace G`) over the load benchmark's gallery; once it says it is
serving, a client sends the most expensive request the limits allow (a BatchSearch of 256 searches
at every limit, with explain: benchmarks/service/robustness/heavy.py) and, `--after` seconds later,
the server gets SIGTERM. Measured: seconds from the signal to the process's exit, and how the call
ended. The goal: exit within grace + 1 s (the batch is cancelled at the grace, between two of its
chunks). The server runs with OMP_NUM_THREADS=1 (see load.set_threads), as one process and as a pool
of two workers (`--workers`: SIGTERM reaches the parent, which stops every worker at once; the grace
is theirs together).

    python -m benchmarks.service.robustness.shutdown  # grace 1 s and 4 s, 1 and 2 workers
    python -m benchmarks.service.robustness.shutdown --grace 2 --rows 20000
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

from benchmarks.harness import publish
from benchmarks.service.load import build_gallery
from benchmarks.service.robustness.heavy import heavy_request
from indexer.format.bundle import Bundle
from service.limits import LIMITS


def serve(bundles: Path, grace: float, workers: int = 1) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "STRATA_LOG_LEVEL": "INFO", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "service", "serve", "--bundles", str(bundles)]
    process = subprocess.Popen(
        [
            *command,
            "--port",
            "0",
            "--grace",
            str(grace),
            "--device",
            "cpu",
            "--workers",
            str(workers),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("serving"):
        process.kill()
        raise RuntimeError(f"strata serve did not start: {line!r}")
    return process, line.split(" on ")[-1].split(";")[0].strip()


def one_run(
    bundles: Path, grace: float, after: float, excluded: list[int], workers: int = 1
) -> dict:
    process, target = serve(bundles, grace, workers)
    outcome: dict[str, object] = {}
    request = heavy_request("batch-explain", excluded, 0)

    def call() -> None:
        options = [("grpc.max_receive_message_length", -1)]
        with grpc.insecure_channel(target, options=options) as channel:
            batch = channel.unary_unary("/strata.v1.SearchService/BatchSearch")
            began = time.perf_counter()
            try:
                batch(request, timeout=600)
                outcome["code"] = "OK"
            except grpc.RpcError as exc:
                outcome["code"] = exc.code().name
            outcome["call_s"] = time.perf_counter() - began

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(after)
    signalled = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=600)
    exit_s = time.perf_counter() - signalled
    thread.join(600)
    return {
        "workers": workers,
        "grace_s": grace,
        "signal_after_s": after,
        "exit_after_signal_s": exit_s,
        "exit_minus_grace_s": exit_s - grace,
        "within_grace_plus_1s": exit_s <= grace + 1.0,
        "returncode": process.returncode,
        "batch_call": outcome,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--grace", default="1,4", help="comma list of --grace values")
    parser.add_argument("--after", type=float, default=1.0, help="seconds before SIGTERM")
    parser.add_argument("--workers", default="1,2", help="comma list of --workers values")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/shutdown.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="strata-shutdown-") as folder:
        bundles = build_gallery(Path(folder), args.rows)
        bundle = Bundle.open(bundles)
        sizes = {c: len(bundle.postings(c)[0]) for c in range(2 * bundle.dim)}
        excluded = sorted(sizes, key=lambda c: -sizes[c])[: LIMITS.concept_refs]
        runs = [
            one_run(bundles, float(g), args.after, excluded, int(w))
            for w in args.workers.split(",")
            for g in args.grace.split(",")
        ]
    result = {
        "benchmark": "shutdown",
        "rows": args.rows,
        "request": f"BatchSearch of {LIMITS.batch_requests} searches at every limit, explain",
        "runs": runs,
        "all_within_grace_plus_1s": all(r["within_grace_plus_1s"] for r in runs),
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
