"""What checking a memory-mapped file at open costs (indexer/format/mapped.py): a shared store of
`--mib` MiB (float16 codes, D = 512, and their norms) is written with `StoreWriter`, then opened
as a `Bundle` opens it, `VectorStore(folder, record, files)` — size, then sha256 of both files
— against the same open without the check (the two np.load memory maps), in `--repeats`
alternating rounds; medians. Two arms: the files in the page cache (just written or read), and
evicted from it first (posix_fadvise DONTNEED on the fsynced files: read from the disk).

    python -m benchmarks.indexer.mapped_check              # 512 MiB
    python -m benchmarks.indexer.mapped_check --mib 2048
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from indexer.format.manifest import FileRecord
from indexer.format.store import FILES, NORMS, VECTORS, VectorStore
from indexer.format.store.writer import StoreWriter, store_record
from training.core.files import sha256_file

DIM, LENGTHS, BLOCK = 512, (32, 64, 128, 256, 512), 65_536


def write_store(folder: Path, mib: int) -> dict[str, FileRecord]:
    """A float16 store of about `mib` MiB of codes; the manifest's records of its files."""
    rows = mib * 2**20 // (DIM * 2)
    writer = StoreWriter(folder, rows, DIM, LENGTHS, "float16")
    rng = np.random.default_rng(0)
    for start in range(0, rows, BLOCK):
        block = rng.standard_normal((min(BLOCK, rows - start), DIM), dtype=np.float32)
        writer.add(block / np.linalg.norm(block, axis=1, keepdims=True))
    return {
        path.name: FileRecord(digest or sha256_file(path), path.stat().st_size, rows)
        for path, digest in writer.close().items()
    }


def evict(folder: Path) -> None:
    """Drop the store's (clean, fsynced) pages from the page cache."""
    for name in FILES:
        descriptor = os.open(folder / name, os.O_RDONLY)
        try:
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)


def opened(folder: Path, files: dict[str, FileRecord] | None, cold: bool) -> float:
    if cold:
        evict(folder)
    record = store_record("float16", LENGTHS)
    began = time.perf_counter()
    store = VectorStore(folder, record, files)
    seconds = time.perf_counter() - began
    del store
    return seconds


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--mib", type=int, default=512, help="MiB of codes (store_vectors.npy)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/mapped_check.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="strata-mapped-") as work:
        folder = Path(work)
        files = write_store(folder, args.mib)
        size = sum(f.bytes for f in files.values())
        arms = {}
        for arm, cold in (("page_cache", False), ("evicted", True)):
            opened(folder, files, cold)  # warm the code paths (and, warm arm, the cache)
            rounds = []
            for _ in range(args.repeats):
                unchecked = opened(folder, None, cold)
                rounds.append({"unchecked_s": unchecked, "checked_s": opened(folder, files, cold)})
            checked = statistics.median(r["checked_s"] for r in rounds)
            unchecked = statistics.median(r["unchecked_s"] for r in rounds)
            arms[arm] = {
                "rounds": rounds,
                "median_unchecked_s": unchecked,
                "median_checked_s": checked,
                "checked_mib_per_s": size / 2**20 / checked,
            }
    result = {
        "benchmark": "mapped_check",
        "files": {VECTORS: files[VECTORS].bytes, NORMS: files[NORMS].bytes},
        "bytes": size,
        "cpus": os.cpu_count(),
        **arms,
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
