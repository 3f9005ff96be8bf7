"""Record a `strata eval` report as a benchmark result: run the command, then write its report in
the result envelope of benchmarks/harness.py (`publish`).

    python -m benchmarks.record NAME REPORT -- strata eval grasp --seed 0 ... --out runs/eval-in

runs the command after `--` (`strata` is this checkout's command), checks that it wrote REPORT
(a JSON file, made or replaced by this run), and writes benchmarks/results/NAME.json with the
command as run, the machine, the date and the report as its figures (`--keep KEY` keeps only
those top-level keys of a large report). docs/benchmarks.md shows the figures of that file.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import RESULTS, benchmark_parser, publish


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        raise SystemExit("record: give the command after `--`")
    split = argv.index("--")
    ours, command = argv[:split], argv[split + 1 :]
    parser = benchmark_parser(__doc__)
    parser.add_argument("name", help="the result's name: benchmarks/results/NAME.json")
    parser.add_argument("report", type=Path, help="the JSON report the command writes")
    parser.add_argument("--keep", action="append", default=[], help="a top-level key to keep")
    parser.add_argument("--json", type=Path, help="write here instead of benchmarks/results/")
    args = parser.parse_args(ours)
    if not command:
        raise SystemExit("record: the command after `--` is empty")
    started = time.time()
    subprocess.run(runnable(command), check=True)
    if not args.report.is_file() or args.report.stat().st_mtime < started:
        raise SystemExit(f"record: {shlex.join(command)} did not write {args.report}")
    report = json.loads(args.report.read_text())
    if args.keep:
        missing = sorted(set(args.keep) - set(report))
        if missing:
            raise SystemExit(f"record: {args.report} has no {', '.join(missing)}")
        report = {key: report[key] for key in args.keep}
    return publish(report, args.json or RESULTS / f"{args.name}.json", shlex.join(command))


def runnable(command: list[str]) -> list[str]:
    """The command as this interpreter runs it: `strata …` is this checkout's `python -m
    service …`, so a record never runs another installation's code."""
    if command[0] == "strata":
        return [sys.executable, "-m", "service", *command[1:]]
    if command[0] == "python":
        return [sys.executable, *command[1:]]
    return command


if __name__ == "__main__":
    main()
