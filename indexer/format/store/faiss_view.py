"""A prefix of the shared vector store as a served index (indexer/format/served_index.py): an
exact scan, and the exact storage of its rows (the `ExactStorage` calls), so that tuning,
verification, explanation and filtering treat a store-served prefix as the exact storage it
is."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from indexer.format.row_bitmaps import AllowedRows
from indexer.format.served.params import SearchParams
from indexer.format.store import SCAN_FLOATS, VectorStore


@dataclass
class StoreIndex:
    """Prefix L of a store: an exact scan, and its rows' exact storage."""

    store: VectorStore
    length: int

    @property
    def ntotal(self) -> int:
        return self.store.rows

    @property
    def d(self) -> int:
        return self.length

    approximate = False

    @property
    def exact(self) -> StoreIndex:
        return self

    @property
    def shortlist(self) -> StoreIndex:
        return self

    @property
    def kind_name(self) -> str:
        return "the shared store"

    def search(
        self,
        x: np.ndarray,
        k: int,
        params: SearchParams | None = None,
        allowed: AllowedRows | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of unit queries [Q, L], inside `allowed` where given (an exact scan has
        no search parameters: `params` is accepted and has nothing to set)."""
        if allowed is not None:
            return self.store.scan(x, self.length, k, allowed.mask())
        return self.store.scan(x, self.length, k)

    def apply(self, setting: str) -> None:
        """An exact scan has no search parameters of its own."""

    def ladders(self) -> list[list[str]]:
        return []

    def widest(self) -> SearchParams:
        return SearchParams()

    def wider_probes(self) -> list[str]:
        return [""]

    def scanned_floats(self, length: int, total: int, params: SearchParams) -> float:
        """A scan reads every row's head: N·S floats."""
        return float(total * length)

    # --- the exact storage (ExactStorage) ---

    def rows(self, rows: np.ndarray) -> np.ndarray:
        return self.store.prefix_rows(rows, self.length)

    def products(self, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Heads scored, then divided (VectorStore.prefix_scores)."""
        return self.store.prefix_scores(rows, self.length, query)

    def rows_products(self, rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """float32 [len(rows), Q], without decoding rows whole (VectorStore.rows_scores)."""
        return self.store.rows_scores(rows, self.length, queries).T

    def block_rows(self, chunk: int) -> int:
        """Rows per block of a pass over every row: what one scan block holds."""
        return max(1024, SCAN_FLOATS // self.length)

    def block(self, start: int, stop: int) -> np.ndarray:
        return self.store.block(start, stop, self.length)

    def block_products(self, start: int, stop: int, queries: np.ndarray) -> np.ndarray:
        return self.store.block_scores(start, stop, self.length, queries).T

    def reconstruct(self, row: int) -> np.ndarray:
        return self.store.prefix_rows(np.array([row]), self.length)[0]

    def reconstruct_n(self, start: int, n: int) -> np.ndarray:
        return self.store.block(start, start + n, self.length)

    def reconstruct_batch(self, rows: np.ndarray) -> np.ndarray:
        return self.store.prefix_rows(rows, self.length)
