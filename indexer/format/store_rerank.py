"""Shortlist codes: a compressed index at one prefix, its candidates reranked exactly from the
shared store (indexer/format/store/).

A bundle with a store keeps every row once, as codes of p_D; a prefix needs an index of its own
only to avoid scanning every row. That index need not hold the rows exactly, because the store
does: it holds compressed codes, and its answers are reranked.

    codes       IVF{nlist},SQ8 over p_S: one byte a coordinate and an 8-byte id a row, in
                inverted lists (at S = 32: 40 B a row, against 400 B for HNSW32 over float32)
    search(k)   the k·F best rows by the codes' approximate s_S (nprobe lists probed), then the
                k best of those by s_S read from the store's heads, ties by row

so the scores a search returns are the store's, as an exact scan of the store returns them, and
F (`k_factor_rf`, FAISS's name for a refine's factor) and nprobe are tuned together at build
time to the recall target (indexer/format/tuning.py). Memory: the codes and the graph-free
lists; the store is read only for the k·F candidates, so it may stay on disk
(`strata index build --store-on-disk`).

`StoreRerank` is a served index (indexer/format/served_index.py), as `StoreIndex` and a mapped
FAISS index are; a search inside allowed rows searches the codes inside them
(`reranked_allowed`).
"""

from __future__ import annotations

import math

import numpy as np

from indexer.format.row_bitmaps import AllowedRows
from indexer.format.served.allowed import pad as pad_one
from indexer.format.served.mapped import K_FACTORS, MappedIndex
from indexer.format.served.params import K_FACTOR, SearchParams
from indexer.format.store import VectorStore
from indexer.format.store.faiss_view import StoreIndex
from indexer.format.store.top_k import pad

DEFAULT_K_FACTOR = 4.0


def rerank_top_k(
    candidates: np.ndarray, scores: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The k best of candidate rows [n] by their exact scores [n], best first, ties by row."""
    order = np.lexsort((candidates, -scores))[:k]
    return scores[order].astype(np.float32), candidates[order].astype(np.int64)


class StoreRerank:
    """Compressed codes at prefix L (a FAISS index, served: `base`) reranked from the store's
    exact heads (`exact`)."""

    approximate = True

    def __init__(
        self, base: MappedIndex, exact: StoreIndex, k_factor: float = DEFAULT_K_FACTOR
    ) -> None:
        if base.ntotal != exact.ntotal or base.d != exact.length:
            raise ValueError(
                f"codes of {base.ntotal} rows × {base.d} do not match the store's "
                f"{exact.ntotal} rows at prefix {exact.length}"
            )
        self.base, self.exact, self.k_factor = base, exact, float(k_factor)

    @property
    def ntotal(self) -> int:
        return int(self.base.ntotal)

    @property
    def d(self) -> int:
        return int(self.base.d)

    @property
    def metric_type(self) -> int:
        return int(self.base.metric_type)

    @property
    def length(self) -> int:
        return self.exact.length

    @property
    def store(self) -> VectorStore:
        """The store it reranks from."""
        return self.exact.store

    @property
    def shortlist(self) -> MappedIndex:
        """What a funnel shortlists with: the codes (the funnel reranks)."""
        return self.base

    @property
    def kind_name(self) -> str:
        return f"{self.base.kind_name} reranked from the store"

    def fetch(self, k: int, k_factor: float | None = None) -> int:
        """Candidates a search for k fetches from the codes: ⌈k·F⌉, at most every row."""
        factor = self.k_factor if k_factor is None else k_factor
        return max(k, min(self.ntotal, math.ceil(k * factor)))

    def search(
        self,
        x: np.ndarray,
        k: int,
        params: SearchParams | None = None,
        allowed: AllowedRows | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k of unit queries [Q, L] by the store's exact s_L among the codes' k·F best:
        (scores [Q, k], rows [Q, k]) padded as FAISS pads; `params`' k_factor the rerank's,
        the rest the codes'; `allowed`: one query inside these rows (`reranked_allowed`)."""
        queries = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float32)
        if allowed is not None:
            return reranked_allowed(self, queries, k, allowed, params or SearchParams())
        base = None if params is None else params.without_k_factor()
        fetch = self.fetch(k, None if params is None else params.k_factor)
        _, candidates = self.base.search(queries, fetch, base)
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        for i, (query, found) in enumerate(zip(queries, candidates, strict=True)):
            found = found[found >= 0]
            exact = self.exact.store.prefix_scores(found, self.exact.length, query)
            best_scores, best_rows = pad(*(a[None] for a in rerank_top_k(found, exact, k)), k)
            scores[i], rows[i] = best_scores[0], best_rows[0]
        return scores, rows

    def apply(self, setting: str) -> None:
        """Its own parameters: the rerank factor (`k_factor_rf`), the rest the codes'."""
        rest, factor = split_k_factor(setting)
        if factor is not None:
            self.k_factor = factor
        self.base.apply(rest)

    def ladders(self) -> list[list[str]]:
        """The codes' ladders climbed once per rerank factor (indexer/format/tuning.py)."""
        return [
            [",".join(filter(None, [setting, f"{K_FACTOR}={factor}"])) for setting in ladder]
            for factor in K_FACTORS
            for ladder in (self.base.ladders() or [[""]])
        ]

    def widest(self) -> SearchParams:
        return self.base.widest()

    def wider_probes(self) -> list[str]:
        return self.base.wider_probes()

    def scanned_floats(self, length: int, total: int, params: SearchParams) -> float:
        return self.base.scanned_floats(length, total, params)

    def reconstruct(self, row: int) -> np.ndarray:
        return self.exact.reconstruct(row)

    def reconstruct_n(self, start: int, n: int) -> np.ndarray:
        return self.exact.reconstruct_n(start, n)

    def reconstruct_batch(self, rows: np.ndarray) -> np.ndarray:
        return self.exact.reconstruct_batch(rows)


def split_k_factor(parameters: str) -> tuple[str, float | None]:
    """'nprobe=32,k_factor_rf=4' → ('nprobe=32', 4.0): the codes' settings and the factor."""
    kept, factor = [], None
    for item in filter(None, (p.strip() for p in parameters.split(","))):
        name, _, value = item.partition("=")
        if name.strip() == K_FACTOR:
            factor = float(value)
        else:
            kept.append(item)
    return ",".join(kept), factor


def reranked_allowed(
    index: StoreRerank, query: np.ndarray, k: int, allowed: AllowedRows, params: SearchParams
) -> tuple[np.ndarray, np.ndarray]:
    """Codes reranked from the store, inside the allowed rows: the codes' own filtered search
    (their nprobe widened by the filter's share) for k·F allowed candidates, reranked exactly;
    should fewer than min(k, allowed) come back, one exact scan of the allowed rows."""
    fetch = index.fetch(k, params.k_factor)
    _, candidates = index.base.search(query, fetch, params.without_k_factor(), allowed)
    found = candidates[0][candidates[0] >= 0]
    store = index.exact.store
    if len(found) < min(k, allowed.count):
        return store.scan(query, index.length, k, allowed.mask())
    scores = store.prefix_scores(found, index.length, query[0])
    return pad_one(*(a[None] for a in rerank_top_k(found, scores, k)), k)
