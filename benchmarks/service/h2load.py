"""Unary gRPC load from h2load, nghttp2's HTTP/2 load generator written in C (Debian's
nghttp2-client; `bash .ci/install-tools` installs it): a generator that takes a few hundredths
of a core where a Python one takes a quarter or more, so on a small machine the server's
processes, not the generator, are what a throughput measures.

A gRPC unary call is an HTTP/2 POST to /package.Service/Method with `content-type:
application/grpc` and `te: trailers`, its body the serialised request behind a 5-byte frame
header (a compression flag, then the length, big-endian). h2load sends one body per process
for the whole run, so a set of requests is spread over processes, one connection each (one
process per request while there are fewer connections than requests, else the connections
dealt round-robin over the requests), all started together. Each runs `--warm-up-time` before
it counts, then counts for `seconds`.

h2load counts an HTTP 200 as a success, and a gRPC error is an HTTP 200 with a non-zero
`grpc-status` trailer; so the calls are checked on the server: `handled` reads the server's
`grpc_server_handled_total` by code before and after an arm, and every call not answered OK
counts as failed, but for the calls still in flight when h2load stops (CANCELLED on the
server, at most one a connection), which are counted apart. Latency percentiles come from
h2load's per-request log. The generator's own CPU is its processes' user and system seconds
(`os.wait4`) over the arm's wall time.
"""

from __future__ import annotations

import os
import shutil
import statistics
import struct
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

SEARCH = "/strata.v1.SearchService/Search"
WARM_UP_S = 1.0


def grpc_frame(body: bytes) -> bytes:
    """A serialised message as a gRPC body: uncompressed, its length big-endian."""
    return b"\x00" + struct.pack(">I", len(body)) + body


def connections_per_request(requests: int, concurrency: int) -> list[int]:
    """How many of `concurrency` connections send each request (module doc): the first
    `concurrency` requests one each, or every request its share, the remainder to the first."""
    if concurrency <= requests:
        return [1] * concurrency
    share, extra = divmod(concurrency, requests)
    return [share + (1 if i < extra else 0) for i in range(requests)]


def handled(metrics_url: str, method: str = "Search") -> dict[str, float]:
    """The server's completed calls of `method` by gRPC code (its Prometheus text)."""
    with urllib.request.urlopen(metrics_url, timeout=10) as answer:
        text = answer.read().decode()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "grpc_server_handled":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels.get("grpc_method") == method:
                code = sample.labels["grpc_code"]
                counts[code] = counts.get(code, 0.0) + sample.value
    return counts


def h2load_arm(
    target: str,
    requests: Sequence[bytes],
    concurrency: int,
    seconds: float,
    count_handled: Callable[[], dict[str, float]],
    path: str = SEARCH,
) -> dict[str, float]:
    """One arm (module doc): QPS of the calls answered OK, their p50 in ms, failed calls, and
    the cores the generator itself took."""
    binary = shutil.which("h2load")
    if binary is None:
        raise RuntimeError("h2load is not installed: bash .ci/install-tools (nghttp2-client)")
    with tempfile.TemporaryDirectory(prefix="strata-h2load-") as folder:
        work = Path(folder)
        started, logs = [], []
        before = count_handled()
        began = time.perf_counter()
        for i, connections in enumerate(connections_per_request(len(requests), concurrency)):
            body, log = work / f"{i}.bin", work / f"{i}.log"
            body.write_bytes(grpc_frame(requests[i]))
            logs.append(log)
            started.append(
                subprocess.Popen(
                    [
                        binary,
                        "--duration",
                        f"{seconds:g}",
                        "--warm-up-time",
                        f"{WARM_UP_S:g}",
                        "--clients",
                        str(connections),
                        "--max-concurrent-streams",
                        "1",
                        "--threads",
                        "1",
                        "--header",
                        "content-type: application/grpc",
                        "--header",
                        "te: trailers",
                        "--data",
                        str(body),
                        "--log-file",
                        str(log),
                        f"http://{target}{path}",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        cpu = 0.0
        for process in started:
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            cpu += usage.ru_utime + usage.ru_stime
            if process.returncode != 0:
                raise RuntimeError(f"h2load exited with {process.returncode} against {target}")
        elapsed = time.perf_counter() - began
        after = count_handled()
        per_request = [_logged_ms(log) for log in logs]
        latencies = [ms for logged in per_request for ms in logged]
    answered = {code: after.get(code, 0.0) - before.get(code, 0.0) for code in after}
    cut_off = answered.get("CANCELLED", 0.0)  # in flight when h2load stopped: at most one each
    return {
        "qps": len(latencies) / seconds,
        "p50_ms": statistics.median(latencies) if latencies else float("nan"),
        "failed": sum(n for code, n in answered.items() if code not in ("OK", "CANCELLED"))
        + max(0.0, cut_off - concurrency),
        "cut_off_at_the_end": cut_off,
        "generator_cores": cpu / elapsed,
        # each request's share of the calls: a closed loop repeats a cheap request more often
        "share_per_request": [
            round(len(logged) / max(1, len(latencies)), 3) for logged in per_request
        ],
    }


def _logged_ms(log: Path) -> list[float]:
    """The measured calls of one h2load log (start µs, HTTP status, elapsed µs): ms of those
    answered 200."""
    out = []
    for line in log.read_text().splitlines():
        fields = line.split("\t")
        if len(fields) >= 3 and fields[1] == "200":
            out.append(int(fields[2]) / 1000)
    return out
