"""Opening a version's prefixes as a bundle serves them: the one place the three kinds meet (a
prefix's own FAISS index, the shared store's exact view, codes reranked from the store)."""

from __future__ import annotations

from pathlib import Path

import faiss

from indexer.format.manifest import PrefixEntry
from indexer.format.prefix_index import (
    IndexFileError,
    apply_search_parameters,
    read_prefix_index,
)
from indexer.format.store import VectorStore
from indexer.format.store.faiss_view import StoreIndex
from indexer.format.store_rerank import StoreRerank


def open_prefix(
    folder: Path, entry: PrefixEntry, store: VectorStore | None
) -> faiss.Index | StoreIndex | StoreRerank:
    """A prefix as a bundle serves it, with the entry's search parameters applied: the store's
    exact view (a prefix it serves), codes reranked from the store (`entry.rerank`), or the
    prefix's own FAISS index, memory-mapped."""
    if (entry.store or entry.rerank) and store is None:
        raise IndexFileError(f"prefix {entry.length} reads a shared store the bundle lacks")
    if entry.store:
        assert store is not None
        return StoreIndex(store, entry.length)
    index = read_prefix_index(folder / entry.file, entry.factory, entry.ondisk)
    if entry.rerank:
        assert store is not None
        index = StoreRerank(index, StoreIndex(store, entry.length))
    apply_search_parameters(index, entry.search)
    return index
