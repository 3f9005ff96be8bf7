"""The tail every new version goes through — build, add and delete alike.

`release_version` runs, with the bundle directory's lock held by the caller:

1. remove leftovers of killed jobs, take the next version number, make a hidden staging folder;
2. `write(staging, version)` writes every file (fsynced) and returns the manifest;
3. `verify(staging)` — any fault removes the staging folder and fails the job;
4. rename the folder to `vNNNNNN/` (crash point `before-rename` just before);
5. publish: switch CURRENT, and with a publisher also record and announce the version in
   Redis, under its lock (indexer/versions/publish.py; crash points `before-pointer-switch` and
   `after-pointer-switch` around it);
6. `on_published(path)` (the lock still held), then retention (`--keep`).

A failure before step 5 leaves CURRENT and Redis as they were (at worst a whole, verified,
unpublished version folder, which `strata index publish` can publish later, or the next job
numbers past).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from indexer.format.manifest import MANIFEST, BundleManifest
from indexer.verify.faults import VerifyReport
from indexer.versions.bundle_store import BundleStore
from indexer.versions.crashpoints import crash_point
from indexer.versions.publish import Publisher, publish_version
from training.core.errors import InputError

WriteVersion = Callable[[Path, int], BundleManifest]
VerifyVersion = Callable[[Path], VerifyReport]


class ReleaseError(InputError):
    """A written version that failed verification (it was removed, nothing was published)."""


@dataclass
class Release:
    """A published version, and what publishing it did."""

    path: Path
    manifest: BundleManifest
    previous: str | None  # the version CURRENT named before
    announced: str | None = None  # where it was announced (None: the pointer file alone)
    removed: list[str] = field(default_factory=list)  # versions retention deleted
    cleaned: list[Path] = field(default_factory=list)  # leftovers of killed jobs removed

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def files(self) -> dict[str, int]:
        """Every file of the version (relative path → bytes), the manifest included."""
        sizes = {name: record.bytes for name, record in self.manifest.files.items()}
        return sizes | {MANIFEST: (self.path / MANIFEST).stat().st_size}


def release_version(
    store: BundleStore,
    write: WriteVersion,
    verify: VerifyVersion,
    keep: int,
    publisher: Publisher | None = None,
    on_published: Callable[[Path], None] | None = None,
) -> Release:
    """Write, verify, rename, publish and retain one new version (see the module docstring).
    Call it with `store.lock()` held."""
    if keep < 1:
        raise ReleaseError(f"--keep must be at least 1, got {keep}")
    cleaned = store.clean()
    version = store.next_version()
    staging = store.staging(version)
    try:
        manifest = write(staging, version)
        report = verify(staging)
        if report.faults:
            raise ReleaseError(
                f"the new version failed verification: {'; '.join(report.faults[:5])}"
            )
        crash_point("before-rename")
        final = store.commit(staging, version)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    previous = store.current()
    crash_point("before-pointer-switch")
    announced = publish_version(store, final.name, publisher)
    crash_point("after-pointer-switch")
    if on_published is not None:
        on_published(final)
    removed = store.retain(keep)
    return Release(final, manifest, previous, announced, removed, cleaned)
