"""What every benchmark script shares: its argument parser, its published JSON, interleaved timing.

A benchmark prints its figures and writes them as JSON (the file docs/benchmarks.md cites); it
is not part of the tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.core.settings import load_settings


def publish(result: dict[str, Any], path: Path) -> dict[str, Any]:
    """Print a benchmark's result and write it as JSON (the file docs/benchmarks.md cites)."""
    text = json.dumps(result, indent=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    print(text)
    return result


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
