"""What every benchmark script shares: its argument parser, its result file, interleaved timing.

A benchmark prints its figures and writes them as one JSON result file, the envelope of
`publish`: the command as run, the machine, the date and the figures. The results that back
the documentation are committed under benchmarks/results/ (`--json
benchmarks/results/NAME.json`, or `python -m benchmarks.record` for a `strata eval` report),
and docs/benchmarks.md is generated from them. A benchmark is not part of the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from training.core.settings import load_settings

RESULT_FORMAT = "strata.benchmark-result/1"
RESULTS = Path(__file__).resolve().parent / "results"  # the committed results the site shows
PACKAGES = ("torch", "faiss-cpu", "faiss-gpu-cu12", "numpy", "open_clip_torch")


def publish(result: dict[str, Any], path: Path, command: str | None = None) -> dict[str, Any]:
    """Print a benchmark's figures and write them in the result envelope (`envelope`) to
    `path`; `command` defaults to the command line that runs this process."""
    record = envelope(result, command or command_as_run())
    text = json.dumps(record, indent=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text + "\n")
    temporary.replace(path)
    print(text)
    return result


def envelope(figures: dict[str, Any], command: str) -> dict[str, Any]:
    """A result file's contents: the format, the command as run, the machine that ran it, the
    date (UTC) and the figures the benchmark measured."""
    return {
        "format": RESULT_FORMAT,
        "command": command,
        "machine": machine(),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "figures": figures,
    }


def read_figures(path: Path) -> dict[str, Any]:
    """The figures of a result file (a bare figures file, as benchmarks wrote before the
    envelope, reads as its own figures)."""
    data = json.loads(path.read_text())
    return data["figures"] if data.get("format") == RESULT_FORMAT else data


def command_as_run() -> str:
    """This process's command line as a user types it: `python -m MODULE ARGS` for a module
    run with -m, else `python SCRIPT ARGS`."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        module = spec.name.removesuffix(".__main__")
        return shlex.join(["python", "-m", module, *sys.argv[1:]])
    return shlex.join(["python", *sys.argv])


def machine() -> dict[str, Any]:
    """The machine a result comes from: CPU model, the cores this process may use, memory,
    GPU (None without one), operating system, Python and the versions of the numeric
    libraries."""
    return {
        "cpu": _cpu_model(),
        "cores": len(os.sched_getaffinity(0)),  # Linux: the cores this process may run on
        "memory_gib": _memory_gib(),
        "gpu": _gpu(),
        "os": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": platform.python_version(),
        "packages": {name: v for name in PACKAGES if (v := _version(name)) is not None},
    }


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware")):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    meminfo = Path("/proc/meminfo")
    if not meminfo.is_file():
        return None
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 2**20, 1)
    return None


def _gpu() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]
    done = subprocess.run(query, capture_output=True, text=True, check=False)
    names = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return ", ".join(names) or None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def benchmark_parser(doc: str | None) -> argparse.ArgumentParser:
    """The argument parser of a benchmark script, its module docstring as the help text."""
    return argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def text_throughput_parser(
    doc: str | None, encoder: str, limit: int | None, repeats: int, json_path: Path
) -> argparse.ArgumentParser:
    """The options of a benchmark that times a corpus's texts through an encoder, `repeats`
    times: --corpus, --path, --encoder, --limit, --batch-size, --repeats, --device, --json."""
    parser = benchmark_parser(doc)
    parser.add_argument("--corpus", default="flickr8k")
    parser.add_argument("--path", type=Path, default=load_settings().data_dir / "flickr8k")
    parser.add_argument("--encoder", default=encoder)
    parser.add_argument("--limit", type=int, default=limit, help="first N records only")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", type=Path, default=json_path)
    return parser


def interleaved(
    arms: dict[str, Callable[[int], object]], queries: int, rounds: int
) -> dict[str, float]:
    """Median seconds of each arm over `queries` single-query calls × `rounds`, the arms timed
    one after another for every query (so drift in the machine falls on all alike)."""
    return {
        name: statistics.median(t) for name, t in interleaved_times(arms, queries, rounds).items()
    }


def interleaved_times(
    arms: dict[str, Callable[[int], object]], queries: int, rounds: int
) -> dict[str, list[float]]:
    """Every call's seconds, arm by arm, as `interleaved` times them: call j of every arm is the
    same query, timed within moments of the others' (what `paired_median` pairs)."""
    times: dict[str, list[float]] = {name: [] for name in arms}
    for arm in arms.values():
        arm(0)  # warm
    for _ in range(rounds):
        for i in range(queries):
            for name, arm in arms.items():
                started = time.perf_counter()
                arm(i)
                times[name].append(time.perf_counter() - started)
    return times


def paired_median(slower: list[float], faster: list[float]) -> float:
    """The median of the per-call differences `slower[j] - faster[j]` of two interleaved arms:
    what one arm adds to the same query. Unlike the difference of two medians, it holds on a
    mix of queries whose costs fall in groups (a p50 that lies between two groups jumps from
    one to the other as the arms' small differences move it)."""
    if len(slower) != len(faster) or not slower:
        raise ValueError(f"pair two arms of the same calls, got {len(slower)} and {len(faster)}")
    return statistics.median(s - f for s, f in zip(slower, faster, strict=True))


def paired_ratio(arm: list[float], baseline: list[float]) -> float:
    """The median of the per-round ratios `arm[r] / baseline[r]` of two arms measured round by
    round side by side (throughputs, say): what one arm gains over the other. A machine whose
    speed drifts between rounds moves both arms of a round alike, which the ratio of the two
    medians does not cancel (each median may come from a different round)."""
    if len(arm) != len(baseline) or not arm:
        raise ValueError(f"pair two arms of the same rounds, got {len(arm)} and {len(baseline)}")
    if min(baseline) <= 0:
        raise ValueError("a baseline round of 0 has no ratio")
    return statistics.median(a / b for a, b in zip(arm, baseline, strict=True))
