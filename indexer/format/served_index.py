"""The served index: one interface for every kind of prefix index a bundle serves, and the one
factory that opens the right kind (the only place that tells the kinds apart).

    MappedIndex   the prefix's own FAISS index, memory-mapped (served/mapped.py)
    StoreIndex    the shared int8 / float16 store's exact scan (store/faiss_view.py)
    StoreRerank   shortlist codes reranked exactly from the store (store_rerank.py)

Each answers `ServedIndex`: `search(x, k, params, allowed)` of unit queries at its prefix, with
typed per-call parameters (`SearchParams`, indexer/format/served/params.py: nprobe, efSearch,
the rerank factor; the index keeps its own) and optionally inside allowed rows
(`AllowedRows`: each kind restricts them its own way); `exact` (the rows it stores exactly, an
`ExactStorage`, or None); `shortlist` (what a funnel shortlists with); `apply` (its own
parameters, from the manifest's ParameterSpace string); the tuning's `ladders`, the funnel's
`wider_probes` and `scanned_floats`. A new kind is one class answering these and one line in
`open_served`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import faiss
import numpy as np

from indexer.format.index_plan import new_index
from indexer.format.prefix_index import IndexFileError, read_prefix_index
from indexer.format.row_bitmaps import AllowedRows
from indexer.format.served.flat import FlatStorage
from indexer.format.served.mapped import MappedIndex
from indexer.format.served.params import SearchParams
from indexer.format.store import VectorStore
from indexer.format.store.faiss_view import StoreIndex
from indexer.format.store_rerank import StoreRerank


class PrefixRecord(Protocol):
    """What the factory reads of a manifest's prefix entry (indexer.format.manifest.PrefixEntry)."""

    length: int
    file: str
    factory: str
    ondisk: bool
    store: bool
    rerank: bool
    search: str


class ExactStorage(Protocol):
    """The rows of a prefix stored exactly (a FAISS flat storage, or the shared store)."""

    @property
    def ntotal(self) -> int: ...
    @property
    def length(self) -> int: ...
    def reconstruct(self, row: int) -> np.ndarray: ...
    def reconstruct_n(self, start: int, n: int) -> np.ndarray: ...
    def reconstruct_batch(self, rows: np.ndarray) -> np.ndarray: ...
    def rows(self, rows: np.ndarray) -> np.ndarray: ...
    def products(self, rows: np.ndarray, query: np.ndarray) -> np.ndarray: ...
    def rows_products(self, rows: np.ndarray, queries: np.ndarray) -> np.ndarray: ...
    def block_rows(self, chunk: int) -> int: ...
    def block(self, start: int, stop: int) -> np.ndarray: ...
    def block_products(self, start: int, stop: int, queries: np.ndarray) -> np.ndarray: ...


class ServedIndex(Protocol):
    """A prefix as a bundle serves it (module docstring)."""

    approximate: bool

    @property
    def ntotal(self) -> int: ...
    @property
    def d(self) -> int: ...
    @property
    def exact(self) -> ExactStorage | None: ...
    @property
    def shortlist(self) -> ServedIndex: ...
    @property
    def store(self) -> VectorStore | None: ...
    @property
    def kind_name(self) -> str: ...
    def search(
        self,
        x: np.ndarray,
        k: int,
        params: SearchParams | None = None,
        allowed: AllowedRows | None = None,
    ) -> tuple[np.ndarray, np.ndarray]: ...
    def apply(self, setting: str) -> None: ...
    def ladders(self) -> list[list[str]]: ...
    def widest(self) -> SearchParams: ...
    def wider_probes(self) -> list[str]: ...
    def scanned_floats(self, length: int, total: int, params: SearchParams) -> float: ...
    def reconstruct_batch(self, rows: np.ndarray) -> np.ndarray: ...
    def reconstruct_n(self, start: int, n: int) -> np.ndarray: ...


def open_served(folder: Path, entry: PrefixRecord, store: VectorStore | None) -> ServedIndex:
    """A prefix as a bundle serves it, with the entry's search parameters applied: the store's
    exact view (a prefix it serves), codes reranked from the store (`entry.rerank`), or the
    prefix's own FAISS index, memory-mapped."""
    if (entry.store or entry.rerank) and store is None:
        raise IndexFileError(f"prefix {entry.length} reads a shared store the bundle lacks")
    if entry.store:
        assert store is not None
        return StoreIndex(store, entry.length)
    index: ServedIndex = mapped(read_prefix_index(folder / entry.file, entry.factory, entry.ondisk))
    if entry.rerank:
        assert store is not None
        index = StoreRerank(index, StoreIndex(store, entry.length))
    index.apply(entry.search)
    return index


def mapped(index: faiss.Index) -> MappedIndex:
    """A FAISS index served: its kind read once (graph, lists, refine, the flat rows it keeps)."""
    owner, index = index, faiss.downcast_index(index)
    graph = index if isinstance(index, faiss.IndexHNSW) else None
    refine = index if isinstance(index, faiss.IndexRefine) else None
    ivf = faiss.try_extract_index_ivf(index)
    flat = None
    if isinstance(index, faiss.IndexFlat):
        flat = index
    elif graph is not None:
        flat = faiss.downcast_index(graph.storage)
    elif refine is not None:
        flat = faiss.downcast_index(refine.refine_index)
    return MappedIndex(
        index,
        graph=graph,
        ivf=ivf,
        refine=refine,
        base=None if refine is None else mapped(refine.base_index),
        coarse=None if ivf is None else mapped(ivf.quantizer),
        exact=FlatStorage(flat, owner) if isinstance(flat, faiss.IndexFlat) else None,
        approximate=not isinstance(index, faiss.IndexFlat),
        flat_codes=isinstance(index, faiss.IndexFlatCodes),
        owner=owner,
    )


def served(index: faiss.Index | ServedIndex) -> ServedIndex:
    """An index as served: a bare FAISS index (one a build, a verification or a test holds)
    wrapped by `mapped`, a served one as it is."""
    if isinstance(index, faiss.Index):
        return mapped(index)
    return index


def default_search_parameters(factory: str, length: int) -> str:
    """FAISS ParameterSpace settings a bundle records per prefix: nprobe = nlist/8 within
    [min(nlist, 16), 128] for IVF, efSearch = 128 for HNSW, k_factor_rf = 4 for a refine."""
    index = mapped(new_index(factory, length))
    settings = []
    if index.ivf is not None:
        nlist = index.ivf.nlist
        settings.append(f"nprobe={max(min(nlist, 16), min(nlist // 8, 128))}")
    if index.graph is not None:  # a graph over the rows (not an IVF's quantizer)
        settings.append("efSearch=128")
    if index.refine is not None:
        settings.append("k_factor_rf=4")
    return ",".join(settings)


# --- bare FAISS indexes, as builds, verification and tests hold them ---


def exact_storage(index: faiss.Index | ServedIndex) -> ExactStorage | None:
    """The rows an index stores exactly (`ServedIndex.exact`), whose `reconstruct(row)` gives
    the stored vector; None for compressed-only indexes."""
    return served(index).exact


def search_parameters(
    index: faiss.Index, setting: str, selector: faiss.IDSelector | None = None
) -> faiss.SearchParameters:
    """One search's parameters of a bare FAISS index as FAISS's object (MappedIndex.
    faiss_params): a ParameterSpace string's efSearch, nprobe and k_factor_rf, `selector`
    restricting the rows."""
    return mapped(index).faiss_params(SearchParams.parse(setting), selector)


def apply_search_parameters(index: faiss.Index | ServedIndex, setting: str) -> None:
    """Set an index's own search parameters (`ServedIndex.apply`)."""
    served(index).apply(setting)
