"""A prefix of the shared vector store seen as a FAISS index (indexer/format/store/): the part of
FAISS's index interface the bundle's readers use, so that tuning, verification, explanation
and filtering treat a store-served prefix as the exact storage it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from indexer.format.store import VectorStore


@dataclass
class StoreIndex:
    """Prefix L of a store with the FAISS index interface the bundle's readers use (exact)."""

    store: VectorStore
    length: int

    @property
    def ntotal(self) -> int:
        return self.store.rows

    @property
    def d(self) -> int:
        return self.length

    def search(self, x: np.ndarray, k: int, params: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of unit queries [Q, L] (`params` is accepted for FAISS's signature; an
        exact scan has no search parameters)."""
        return self.store.scan(x, self.length, k)

    def reconstruct(self, row: int) -> np.ndarray:
        return self.store.prefix_rows(np.array([row]), self.length)[0]

    def reconstruct_n(self, start: int, n: int) -> np.ndarray:
        return self.store.block(start, start + n, self.length)

    def reconstruct_batch(self, rows: np.ndarray) -> np.ndarray:
        return self.store.prefix_rows(rows, self.length)
