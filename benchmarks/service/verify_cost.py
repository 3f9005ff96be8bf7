"""What refusing corrupt versions costs: the check every serving path runs before a version is
served (`indexer.verify.check.check_servable`), as a ratio to loading that version the way a server
does (`Bundle.open_version(path)` + `SearchEngine(bundle, None)`: every index memory-mapped,
ids, postings, metadata and both artifacts read), in the same process, alternating, in
`--repeats` rounds; medians. Also `strata index verify`'s full check (with the 64-row source
cache sample) for comparison. The bundle's files are in the page cache for every arm (each
arm reads the same files right after the other): a cold disk slows both, the checksums most.

    python -m benchmarks.service.verify_cost                 # 100,000 × 384 (the load gallery)
    python -m benchmarks.service.verify_cost --rows 20000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.harness import publish
from benchmarks.service.load import build_gallery
from indexer.format.bundle import Bundle
from indexer.format.manifest import read_manifest
from indexer.verify.check import check_servable, verify_bundle
from service.engine.search import SearchEngine


def load_seconds(path: Path) -> float:
    began = time.perf_counter()
    engine = SearchEngine(Bundle.open_version(path), None)
    seconds = time.perf_counter() - began
    del engine
    return seconds


def timed(call) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/verify_cost.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="strata-verify-") as folder:
        path = Bundle.open(build_gallery(Path(folder), args.rows)).path
        size = sum(f.bytes for f in read_manifest(path).files.values())
        load_seconds(path)  # warm the page cache and the imports
        rounds = []
        for _ in range(args.repeats):
            rounds.append(
                {
                    "load_s": load_seconds(path),
                    "check_servable_s": timed(lambda: check_servable(path)),
                    "verify_full_s": timed(lambda: verify_bundle(path)),
                }
            )
    load = statistics.median(r["load_s"] for r in rounds)
    check = statistics.median(r["check_servable_s"] for r in rounds)
    full = statistics.median(r["verify_full_s"] for r in rounds)
    result = {
        "benchmark": "verify_cost",
        "rows": args.rows,
        "dim": 384,
        "bundle_bytes": size,
        "rounds": rounds,
        "median_load_s": load,
        "median_check_servable_s": check,
        "median_verify_full_s": full,
        "check_servable_over_load": check / load,
        "check_servable_over_load_per_round": [r["check_servable_s"] / r["load_s"] for r in rounds],
        "verify_full_over_load": full / load,
        "check_servable_mib_per_s": size / 2**20 / check,
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
