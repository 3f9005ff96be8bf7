"""The files of a bundle version that are memory-mapped, checked before they are mapped.

A serving process maps the shared store (store_vectors.npy, store_norms.npy), every prefix's
FAISS index (and its .ivfdata when the lists are on disk) and the postings. A mapped file that
is truncated kills the process with SIGBUS at its next touch of a page past the new end; one
damaged before it is mapped serves wrong rows. So before a `Bundle` maps a file (`Bundle.load`
maps them all; a lazily opened bundle each on first use) and before `VectorStore` maps its two
when given the manifest's `files`, each file is compared with its record there: its size first
(a stat, so a truncated file is refused without being read), then its sha256, read in 8 MiB
blocks (`training.core.files.recorded_mismatch`). A mismatch is refused with one line naming
the file, the size or digest found and the one recorded, and `strata index verify`, which
lists every fault of the version. A file the manifest does not record (a bundle written before
a record existed) is mapped unchecked.

This refuses damage done before the version is opened. Damage after it (a published file
truncated or rewritten under the server) is prevented on the writers' side: every writer
creates its files exclusively in a fresh staging folder that is renamed into place
(training.core.files.HashedFile and create_new; indexer/versions/bundle_store.py), so nothing
in Strata reopens a published file for writing.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

import numpy as np

from training.core.errors import InputError
from training.core.files import recorded_mismatch


class Recorded(Protocol):
    """What the manifest records of a file (indexer.format.manifest.FileRecord)."""

    sha256: str
    bytes: int


def check_mapped_files(
    folder: Path,
    files: Mapping[str, Recorded],
    names: Iterable[str],
    error: type[InputError],
) -> None:
    """Raise `error` for the first of `names` (files of the version `folder`) that differs from
    its record in `files`: missing, another size, or another sha256. Unrecorded names pass."""
    for name in names:
        record = files.get(name)
        if record is None:
            continue
        path = folder / name
        verify = f"`strata index verify {folder}` checks every file"
        if not path.is_file():
            raise error(f"{name} is missing from {folder}, the manifest records it ({verify})")
        mismatch = recorded_mismatch(path, record.bytes, record.sha256)
        if mismatch is None:
            continue
        unit = " bytes" if mismatch.what == "size" else ""
        raise error(
            f"{name} in {folder} is damaged, refused before it is memory-mapped: "
            f"{mismatch.what} {mismatch.found}{unit}, the manifest records "
            f"{mismatch.expected}{unit} (changed since the version was written; {verify})"
        )


def advise_random(array: np.ndarray) -> None:
    """Tell the kernel a memory-mapped array is read at random (MADV_RANDOM: a page fault reads
    its page, not the pages after it), where the platform has madvise."""
    mapped = getattr(array, "_mmap", None)
    if mapped is not None and hasattr(mmap, "MADV_RANDOM"):
        mapped.madvise(mmap.MADV_RANDOM)


def release_rows(array: np.ndarray, start: int, stop: int) -> None:
    """MADV_DONTNEED on the pages holding rows [start, stop) of a memory-mapped array (np.load's
    memmap: its data begins `offset` bytes into the file, which its mmap starts at the
    allocation granularity below), where the platform has madvise; else nothing."""
    mapped = getattr(array, "_mmap", None)
    if mapped is None or not hasattr(mmap, "MADV_DONTNEED") or stop <= start:
        return
    begin = int(getattr(array, "offset", 0)) % mmap.ALLOCATIONGRANULARITY
    row = array.strides[0]
    low = (begin + start * row) // mmap.PAGESIZE * mmap.PAGESIZE
    high = min(len(mapped), -(-(begin + stop * row) // mmap.PAGESIZE) * mmap.PAGESIZE)
    if high > low:
        mapped.madvise(mmap.MADV_DONTNEED, low, high - low)
