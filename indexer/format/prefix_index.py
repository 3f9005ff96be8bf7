"""One FAISS index per prefix length: reading it memory-mapped (writing it shard by shard:
indexer/format/prefix_writers.py; serving it: indexer/format/served_index.py).

Reading (`read_prefix_index`): Flat and HNSW codes and IVF lists in the index file are
memory-mapped as the file's own bytes (IO_FLAG_MMAP_IFC), on-disk lists are opened beside the
index file (IO_FLAG_ONDISK_SAME_DIR), so a service process maps a bundle rather than loading it.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import faiss

from training.core.errors import InputError


class IndexFileError(InputError, RuntimeError):
    """A prefix index file that is missing or FAISS cannot read (a RuntimeError too, as FAISS's
    own error is, so callers that catch that keep working)."""


def read_prefix_index(path: Path, factory: str, ondisk: bool) -> faiss.Index:
    """Open an index memory-mapped (see the module docstring for which flag each kind gets);
    a missing or unreadable file is an IndexFileError naming it, not FAISS's C++ traceback."""
    if not path.is_file():
        raise IndexFileError(f"index file missing: {path}")
    try:
        return _read_prefix_index(path, factory, ondisk)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreadable"
        raise IndexFileError(
            f"cannot read the FAISS index {path} (truncated or damaged? `strata index verify` "
            f"checks every file): {first}"
        ) from None


def _read_prefix_index(path: Path, factory: str, ondisk: bool) -> faiss.Index:
    if ondisk:
        with quiet_stdout():  # FAISS prints the list file's new path on stdout
            return faiss.read_index(
                str(path), faiss.IO_FLAG_ONDISK_SAME_DIR | faiss.IO_FLAG_READ_ONLY
            )
    # zero-copy maps of the file's own bytes, IVF lists included (FAISS ≥ 1.15); IO_FLAG_MMAP's
    # lists are read through a slower path on every probe
    return faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)


@contextmanager
def quiet_stdout() -> Iterator[None]:
    """Silence what FAISS's C++ code prints on file descriptor 1 (OnDiskInvertedLists reports
    resizes and renames there), so a command's stdout carries only its own output."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        ctypes.CDLL(None).fflush(None)  # C stdio buffers, before fd 1 is restored
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
