"""A bundle directory's versions: staging, the atomic publish, retention, and crash leftovers.

The order of a publish, and what a crash at each point leaves:

1. take `.lock` (fcntl.flock; the kernel drops it when the process dies, so a killed build
   never blocks the next one) and remove leftovers of killed builds (`.tmp-*`, `.trash-*`,
   `.CURRENT.tmp-*`);
2. write every file into `.tmp-vNNNNNN-PID/`, each created new (a writer never opens an
   existing file: a published one may be memory-mapped by a server), fsync each, verify — a
   crash leaves a hidden temporary folder, CURRENT untouched;
3. rename it to `vNNNNNN/`, fsync BUNDLES — a crash leaves a whole, verified version that is not
   published (readers follow CURRENT, which still names the previous one);
4. switch CURRENT: write `.CURRENT.tmp-PID`, fsync, os.replace onto CURRENT, fsync BUNDLES —
   os.replace is atomic, so readers see the old name or the new one (with Redis configured,
   under its publish lock and followed by the announcement: indexer/versions/publish.py);
5. retention: each old version beyond --keep is first renamed to `.trash-…` (atomic, so no
   half-deleted version is ever visible), then deleted. The current version is never removed.

CURRENT is a small file rather than a symlink so that the pointer survives tools that follow or
drop symlinks (object-store syncs, some archivers), reads the same on every filesystem, and its
replacement is the same write-fsync-rename as every other file here. Version numbers only grow:
the next is one more than the largest version folder or CURRENT ever seen here. Build, add and
delete run these steps through one function, indexer/versions/release.py.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from indexer.format.manifest import (
    CURRENT,
    MANIFEST,
    BundleError,
    BundleManifest,
    parse_version_name,
    read_current,
    read_manifest,
    version_name,
)
from training.core.files import atomic_write_bytes, fsync_dir

LOCK = ".lock"
STAGING_PREFIX = ".tmp-"
TRASH_PREFIX = ".trash-"


@dataclass
class VersionInfo:
    name: str
    version: int
    path: Path
    manifest: BundleManifest | None  # None: the folder holds no readable manifest


class BundleStore:
    """The BUNDLES directory: its versions, the CURRENT pointer, and the steps of a publish."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser()

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the directory's build lock (one build at a time), or refuse at once."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            handle = (self.root / LOCK).open("a+")
        except OSError as exc:
            raise BundleError(f"cannot write bundles to {self.root}: {exc.strerror}") from None
        try:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "?"
                raise BundleError(
                    f"another build is writing to {self.root} (pid {holder}); wait for it"
                ) from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            yield
        finally:
            handle.close()  # closing releases the flock

    def leftovers(self) -> list[Path]:
        """What killed builds left: staging folders, trash, temporary CURRENT files."""
        if not self.root.is_dir():
            return []
        prefixes = (STAGING_PREFIX, TRASH_PREFIX, f".{CURRENT}.tmp-")
        return sorted(p for p in self.root.iterdir() if p.name.startswith(prefixes))

    def clean(self) -> list[Path]:
        """Remove the leftovers (call with the lock held)."""
        removed = self.leftovers()
        for path in removed:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
        if removed:
            fsync_dir(self.root)
        return removed

    def current(self) -> str | None:
        return read_current(self.root) if self.root.is_dir() else None

    def versions(self) -> list[VersionInfo]:
        """Every version folder, oldest first (manifest None where it cannot be read)."""
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.iterdir():
            number = parse_version_name(path.name)
            if number is None or not path.is_dir():
                continue
            try:
                manifest = read_manifest(path)
            except BundleError:
                manifest = None
            found.append(VersionInfo(path.name, number, path, manifest))
        return sorted(found, key=lambda v: v.version)

    def next_version(self) -> int:
        numbers = [v.version for v in self.versions()]
        current = self.current()
        if current is not None:
            numbers.append(parse_version_name(current) or 0)
        return max(numbers, default=0) + 1

    def staging(self, version: int) -> Path:
        """A fresh hidden folder to write a version into."""
        path = self.root / f"{STAGING_PREFIX}{version_name(version)}-{os.getpid()}"
        path.mkdir(parents=True)
        return path

    def commit(self, staging: Path, version: int) -> Path:
        """Rename a written, fsynced, verified staging folder to its version name."""
        final = self.root / version_name(version)
        if final.exists():
            raise BundleError(f"{final} exists already")
        staging.rename(final)
        fsync_dir(self.root)
        return final

    def switch(self, name: str) -> None:
        """Publish a version: CURRENT ← name, atomically."""
        if parse_version_name(name) is None or not (self.root / name).is_dir():
            raise BundleError(f"cannot publish {name!r}: no such version in {self.root}")
        if not (self.root / name / MANIFEST).is_file():  # written last: a partial version
            raise BundleError(f"cannot publish {name}: {self.root / name} has no {MANIFEST}")
        atomic_write_bytes(self.root / CURRENT, f"{name}\n".encode())

    def retain(self, keep: int) -> list[str]:
        """Remove all but the newest `keep` whole versions; never the current one."""
        if keep < 1:
            raise BundleError(f"--keep must be at least 1, got {keep}")
        current = self.current()
        whole = [v for v in self.versions() if v.manifest is not None]
        kept = {v.name for v in whole[-keep:]} | {current}
        removed = []
        for info in whole:
            if info.name in kept:
                continue
            trash = self.root / f"{TRASH_PREFIX}{info.name}-{os.getpid()}"
            info.path.rename(trash)
            fsync_dir(self.root)
            shutil.rmtree(trash)
            removed.append(info.name)
        return removed
