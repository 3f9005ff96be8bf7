"""Durable files: sha256 of a file (read back, or computed on the way as a file is written),
a file checked against its recorded size and sha256, fsync of files and directories, the atomic
write of a whole file.

A file that a reader may have memory-mapped is never opened for writing again: `HashedFile` and
`create_new` create their file exclusively (mode "xb"), so a writer pointed at an existing file
fails (FileExistsError) instead of truncating it under a reader, which would die of SIGBUS at
its next touch of a page past the new end.

A rename is only durable once the directory that holds the name is fsynced, and a file's
bytes only once the file is; the bundle's crash safety rests on doing both in this order:
write → fsync file → rename → fsync directory.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

CHUNK = 8 * 2**20


def sha256_file(path: Path) -> str:
    """The sha256 of a file's bytes, read in 8 MiB chunks (bounded memory for any size)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Mismatch:
    """How a file differs from its record: `what` is "size" (found and expected in bytes) or
    "sha256" (hex digests)."""

    what: str
    found: int | str
    expected: int | str


def recorded_mismatch(path: Path, size: int, sha256: str) -> Mismatch | None:
    """None when an existing file has the recorded size and sha256, else how it differs: the
    size first (a stat: a truncated or extended file is refused without reading it), then the
    digest (`sha256_file`: bounded by sha256 itself, about 1.4 GB/s on one core, or the disk)."""
    found = path.stat().st_size
    if found != size:
        return Mismatch("size", found, size)
    digest = sha256_file(path)
    if digest != sha256:
        return Mismatch("sha256", digest, sha256)
    return None


def create_new(path: Path) -> Path:
    """Create `path` empty, or raise FileExistsError when the name is taken: the guard for a
    writer that opens its file by name itself (FAISS, numpy's open_memmap, parquet) and would
    truncate a file that is there."""
    path.open("xb").close()
    return path


class HashedFile:
    """A new file written front to back whose sha256 is computed from the bytes as they are
    handed to it, so a large file is never read back to be hashed. Created exclusively (an
    existing file is never truncated: FileExistsError). `close` fsyncs it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bytes = 0
        self._digest = hashlib.sha256()
        self._handle = path.open("xb")

    def write(self, payload: bytes | memoryview) -> None:
        self._handle.write(payload)
        self._digest.update(payload)
        self.bytes += len(payload)

    def close(self) -> str:
        """Flush and fsync the file, close it; its sha256 (hex)."""
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        return self._digest.hexdigest()


def fsync_file(path: Path) -> None:
    """Flush a file's data (also what was written through a shared mmap) to the disk."""
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


def fsync_dir(path: Path) -> None:
    """Make the names in a directory (creations, renames, removals) durable."""
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def fsync_tree(root: Path) -> None:
    """fsync every file under `root`, then every directory, deepest first."""
    directories = []
    for folder, _, files in os.walk(root):
        directories.append(Path(folder))
        for name in files:
            fsync_file(Path(folder) / name)
    for folder in sorted(directories, key=lambda p: len(p.parts), reverse=True):
        fsync_dir(folder)


def atomic_write_bytes(path: Path, payload: bytes) -> None:
    """Replace `path` atomically: write a temporary sibling, fsync it, os.replace, fsync the dir.

    A reader sees the old content or the new one, never a mix; a crash leaves at most the
    temporary (`.NAME.tmp-PID`), which the next writer removes. Missing parents are made.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("wb") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)
    fsync_dir(path.parent)
