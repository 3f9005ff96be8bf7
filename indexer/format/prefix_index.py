"""One FAISS index per prefix length: reading it memory-mapped, and its search parameters
(writing it shard by shard: indexer/format/prefix_writers.py).

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
import numpy as np

from indexer.format.index_plan import new_index
from indexer.format.store.faiss_view import StoreIndex
from indexer.format.store_rerank import RerankParameters, StoreRerank, split_k_factor
from training.core.errors import InputError


def default_search_parameters(factory: str, length: int) -> str:
    """FAISS ParameterSpace settings a bundle records per prefix: nprobe = nlist/8 within
    [min(nlist, 16), 128] for IVF, efSearch = 128 for HNSW, k_factor_rf = 4 for a refine."""
    index = new_index(factory, length)  # index_factory's result is already downcast
    settings = []
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        settings.append(f"nprobe={max(min(ivf.nlist, 16), min(ivf.nlist // 8, 128))}")
    if isinstance(index, faiss.IndexHNSW):  # a graph over the rows (not an IVF's quantizer)
        settings.append("efSearch=128")
    if isinstance(index, faiss.IndexRefine):
        settings.append("k_factor_rf=4")
    return ",".join(settings)


def apply_search_parameters(index: faiss.Index | StoreRerank, parameters: str) -> None:
    """Set an index's own search parameters (what every search without `params` uses); a
    store rerank takes its `k_factor_rf` itself and passes the rest to its codes."""
    if isinstance(index, StoreRerank):
        parameters, factor = split_k_factor(parameters)
        if factor is not None:
            index.k_factor = factor
        index = index.base
    if parameters:
        faiss.ParameterSpace().set_index_parameters(index, parameters)


def parse_search_parameters(parameters: str) -> dict[str, float]:
    """'nprobe=32,k_factor_rf=4' → {'nprobe': 32.0, 'k_factor_rf': 4.0}."""
    parsed = {}
    for item in filter(None, (p.strip() for p in parameters.split(","))):
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"bad search parameter {item!r}: expected NAME=VALUE")
        parsed[name.strip()] = float(value)
    return parsed


def search_parameters(
    index: faiss.Index | StoreRerank, parameters: str, selector: faiss.IDSelector | None = None
) -> faiss.SearchParameters | RerankParameters:
    """One search's parameters as a FAISS object (the index's own are left alone, so threads
    may search one index with different settings): a ParameterSpace string's efSearch, nprobe
    and k_factor_rf where given, else the index's current values; `selector` restricts the rows
    (for a rerank it goes to the base index, whose candidates are reranked)."""
    if isinstance(index, StoreRerank):
        rest, factor = split_k_factor(parameters)
        base = search_parameters(index.base, rest, selector)
        return RerankParameters(base, index.k_factor if factor is None else factor)
    given = parse_search_parameters(parameters)
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexRefine):
        base = search_parameters(index.base_index, parameters, selector)
        params = faiss.IndexRefineSearchParameters()
        params.k_factor = float(given.get("k_factor_rf", index.k_factor))
        params.base_index_params = base
        params.referenced = base  # keeps the base's parameters alive as long as these
        return params
    if isinstance(index, faiss.IndexHNSW):
        params = faiss.SearchParametersHNSW()
        params.efSearch = int(given.get("efSearch", index.hnsw.efSearch))
    elif (ivf := faiss.try_extract_index_ivf(index)) is not None:
        params = faiss.SearchParametersIVF()
        params.nprobe = int(given.get("nprobe", ivf.nprobe))
        params.max_codes = ivf.max_codes
    else:
        params = faiss.SearchParameters()
    if selector is not None:
        params.sel = selector
        params.referenced = selector  # a Python reference: the selector outlives the search
    return params


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


def exact_storage(
    index: faiss.Index | StoreIndex | StoreRerank,
) -> faiss.Index | StoreIndex | None:
    """The part of an index that stores p_L exactly (Flat; HNSW's flat storage; a refine's flat
    index; a prefix served from the shared store, or reranked from it), whose `reconstruct(row)`
    gives the stored vector; None for compressed-only indexes."""
    if isinstance(index, StoreIndex):
        return index
    if isinstance(index, StoreRerank):
        return index.exact
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexFlat):
        return index
    if isinstance(index, faiss.IndexHNSW):
        storage = faiss.downcast_index(index.storage)
        return storage if isinstance(storage, faiss.IndexFlat) else None
    if isinstance(index, faiss.IndexRefine):
        refine = faiss.downcast_index(index.refine_index)
        return refine if isinstance(refine, faiss.IndexFlat) else None
    return None


def stored_rows(storage: faiss.Index | StoreIndex, rows: np.ndarray) -> np.ndarray:
    """float32 [len(rows), d]: the stored vectors of `rows` in an `exact_storage`; read straight
    off an IndexFlat's code array (a numpy gather, no per-row FAISS call), else through
    `reconstruct_batch`."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    if isinstance(storage, faiss.IndexFlat) and storage.ntotal:
        codes = faiss.rev_swig_ptr(storage.get_xb(), storage.ntotal * storage.d)
        return codes.reshape(storage.ntotal, storage.d)[rows]
    return storage.reconstruct_batch(rows)
