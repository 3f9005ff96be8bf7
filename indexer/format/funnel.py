"""The funnel plan: shortlist k·F rows at a short prefix S, rerank them exactly at the target L.

    shortlist   C = the k·F best rows by s_S(q, x) = ⟨p_S(q), p_S(x)⟩  (the prefix-S index)
    rerank      the k best rows of C by s_L(q, x) = ⟨p_L(q), p_L(x)⟩, computed exactly

A prefix index scans S/L of the bytes a direct search at L scans, and the rerank reads k·F
rows; on rows whose variance a learned rotation puts first, the true top k at L lie within the
top k·F at S, so the funnel finds them for a fraction of the cost (figures:
docs/benchmarks.md#the-funnel; `python -m benchmarks.service.layout.funnel`).

The rerank reads exact rows the bundle already holds: the stored p_M rows of the smallest
prefix M ≥ L whose index keeps them exactly (Flat; HNSW's flat storage; a refine's Flat), as
a numpy view of FAISS's own (memory-mapped) storage, no copy; or, in a bundle with a shared
store (indexer/format/store/), the heads of the store's rows, renormalised. Any prefix L ≤ M is
served from them, because p_L(p_M(x)) = p_L(x): p_M(x) is z[:M] times a positive number, and
p_L divides that number out again. An index with no exact rows (IVF-PQ with its lists on
disk) cannot be reranked from; the funnel is then unavailable at that target.

Scores are s_L, as a direct search at L returns them; ties are broken by row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from indexer.format.served.params import SearchParams
from indexer.format.served_index import ExactStorage, ServedIndex, served
from indexer.format.store import VectorStore
from training.core.metrics import neighbour_recall, prefix_vectors


@dataclass(frozen=True)
class ExactRows:
    """The exact p_M rows [N, M] float32 of one prefix index (a view of its storage: the
    index is kept alongside, so the memory stays mapped), or of the shared store (`store`,
    whose rows give p̂_L at any L; `vectors` is then empty)."""

    length: int
    vectors: np.ndarray
    index: ExactStorage
    store: VectorStore | None = None

    @classmethod
    def of(cls, index: ServedIndex, length: int) -> ExactRows | None:
        """The rows an index stores exactly, or None when it stores none."""
        storage = served(index).exact
        if storage is None:
            return None
        if storage.store is not None:  # the shared store: p̂_L at any L
            return cls(length, np.zeros((0, length), np.float32), storage, storage.store)
        return cls(length, storage.vectors, storage)

    def prefix_rows(self, rows: np.ndarray, length: int) -> np.ndarray:
        """p_L of the given rows [n, L]: the stored rows themselves when L = M, else their
        first L coordinates renormalised (p_L(p_M(x)) = p_L(x))."""
        if self.store is not None:
            return self.store.prefix_rows(rows, length)
        taken = self.vectors[rows]
        return taken if length == self.length else prefix_vectors(taken, length)

    def prefix_scores(self, rows: np.ndarray, length: int, query: np.ndarray) -> np.ndarray:
        """s_L of the given rows against one unit query p_L [L], float32 [n] (the store scores
        its rows without widening whole rows: VectorStore.prefix_scores)."""
        if self.store is not None:
            return self.store.prefix_scores(rows, length, query)
        return self.prefix_rows(rows, length) @ query

    @property
    def count(self) -> int:
        return len(self.vectors) if self.store is None else self.store.rows

    def sample(self, rows: np.ndarray) -> np.ndarray:
        """The p_M rows themselves, [n, M]."""
        return self.prefix_rows(np.asarray(rows, dtype=np.int64), self.length)


class RerankRows(Protocol):
    """Where a shortlist's exact rows are read back from: `ExactRows`, or the vectors an
    engine returned with its hits (service/engine/milvus/entities.py)."""

    def prefix_scores(self, rows: np.ndarray, length: int, query: np.ndarray) -> np.ndarray:
        """s_L of the given rows against one unit query p_L [L], float32 [n]."""


def rerank(
    exact: RerankRows, query: np.ndarray, candidates: np.ndarray, length: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The k best candidates by exact s_L: (scores [1, k], rows [1, k]), rows −1 and scores
    −inf past the last candidate; `query` is the rotated query [≥ L] (p_L taken here),
    `candidates` a shortlist's rows (−1 entries ignored, repeats not expected)."""
    rows = np.asarray(candidates, dtype=np.int64).reshape(-1)
    rows = rows[rows >= 0]
    scores = np.zeros(0, dtype=np.float32)
    if len(rows):
        q = prefix_vectors(np.asarray(query, dtype=np.float32).reshape(1, -1), length)[0]
        scores = exact.prefix_scores(rows, length, q)
        order = np.lexsort((rows, -scores))[:k]
        scores, rows = scores[order], rows[order]
    return pad_hits(scores.astype(np.float32), rows, k)


def pad_hits(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """FAISS's shape for one query: [1, k], rows −1 and scores −inf past the last hit."""
    missing = k - len(rows)
    if missing > 0:
        scores = np.concatenate([scores, np.full(missing, -np.inf, np.float32)])
        rows = np.concatenate([rows, np.full(missing, -1, np.int64)])
    return scores[None, :k], rows[None, :k]


def funnel_search(
    shortlist_index: ServedIndex,
    shortlist_length: int,
    exact: ExactRows,
    rotated: np.ndarray,
    length: int,
    k: int,
    factor: int,
    setting: str = "",
) -> tuple[np.ndarray, np.ndarray]:
    """Unfiltered funnel for rotated queries [Q, D]: one search of the prefix-S index for the
    k·F best rows of every query (with `setting`, search parameters other than the index's
    own, e.g. a wider nprobe), then each query's exact rerank at L (module docstring);
    (scores [Q, k], rows [Q, k])."""
    shortlisted = min(k * factor, int(shortlist_index.ntotal))
    queries = prefix_vectors(rotated, shortlist_length)
    if setting:
        params = SearchParams.parse(setting)
        _, candidates = served(shortlist_index).search(queries, shortlisted, params)
    else:  # any index with FAISS's search(x, k), the GPU benchmark's device arm too
        _, candidates = shortlist_index.search(queries, shortlisted)
    found = [rerank(exact, rotated[i], candidates[i], length, k) for i in range(len(rotated))]
    return np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found])


def exact_rows_for(indexes: dict[int, ServedIndex], length: int) -> ExactRows | None:
    """The exact rows to rerank at L from: those of the smallest prefix M ≥ L whose index keeps
    them (`indexes`: prefix length → index); None when no such prefix has them."""
    for m in sorted(n for n in indexes if n >= length):
        found = ExactRows.of(indexes[m], m)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class FunnelChoice:
    """A funnel measured on the bundle's own rows: shortlist prefix S, factor F, and the
    recall@k it reached against exact search at the target on `queries` gallery rows."""

    shortlist_prefix: int
    factor: int
    recall: float
    queries: int
    cost_share: float  # (N·S + k·F·L) / (N·L): the scanned floats, as a share of a direct scan
    shortlist_search: str = ""  # the shortlist's search parameters, where not its own (nprobe)


def exact_neighbours(
    exact: ExactRows, rotated: np.ndarray, length: int, k: int, block: int = 65_536
) -> np.ndarray:
    """Exact top-k rows [Q, k] by s_L over every stored row, `block` rows at a time."""
    q = prefix_vectors(rotated, length)
    best_scores = np.full((len(q), 0), -np.inf, dtype=np.float32)
    best_rows = np.zeros((len(q), 0), dtype=np.int64)
    for start in range(0, exact.count, block):
        rows = np.arange(start, min(start + block, exact.count))
        scores = np.concatenate([best_scores, q @ exact.prefix_rows(rows, length).T], axis=1)
        ids = np.concatenate([best_rows, np.broadcast_to(rows, (len(q), len(rows)))], axis=1)
        keep = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        best_scores = np.take_along_axis(scores, keep, axis=1)
        best_rows = np.take_along_axis(ids, keep, axis=1)
    return best_rows


def calibrate(
    indexes: dict[int, ServedIndex],
    exact: ExactRows,
    length: int,
    k: int = 10,
    recall: float = 0.99,
    factors: tuple[int, ...] = (10, 20, 50, 100),
    queries: int = 100,
    max_cost_share: float = 0.5,
    seed: int = 0,
) -> FunnelChoice | None:
    """The cheapest funnel to target L that reaches `recall` on the bundle's own rows, or None.

    Queries are `queries` gallery rows drawn with `seed`, each searched leave-one-out (k + 1
    hits, its own row dropped), so the rows stand in for queries from the same distribution.
    Candidates (S, F), S every indexed prefix below L and F in `factors`, are tried in order of
    the floats they scan, `ServedIndex.scanned_floats` + k·F·L, against N·L for a direct scan;
    the first whose recall@k against exact search at L is ≥ `recall` wins, provided that share is
    ≤ `max_cost_share` (else the funnel would not pay, and None is returned)."""
    indexes = {n: served(index) for n, index in indexes.items()}
    total = exact.count
    picked = np.sort(np.random.default_rng(seed).choice(total, min(queries, total), replace=False))
    rotated = exact.sample(picked)  # p_M(x): its p_L is p_L(x), a rotated query's
    if exact.store is not None:  # one scan of the store's heads, top-k merged block by block
        found = exact.store.scan(prefix_vectors(rotated, length), length, k + 1)[1]
    else:
        found = exact_neighbours(exact, rotated, length, k + 1)
    truth = without_self(found, picked, k)
    costs = sorted(
        (
            (indexes[s].scanned_floats(s, total, SearchParams.parse(setting)) + k * f * length)
            / (total * length),
            s,
            f,
            setting,
        )
        for s in indexes
        if s < length
        for setting in indexes[s].wider_probes()
        for f in factors
    )

    def funnel_rows(s: int, f: int, setting: str) -> np.ndarray:
        return funnel_search(indexes[s], s, exact, rotated, length, k + 1, f, setting)[1]

    return cheapest_funnel(costs, funnel_rows, truth, picked, k, recall, max_cost_share)


def cheapest_funnel(
    costs: Iterable[tuple[float, int, int, str]],
    funnel_rows: Callable[[int, int, str], np.ndarray],
    truth: np.ndarray,
    picked: np.ndarray,
    k: int,
    recall: float,
    max_cost_share: float,
) -> FunnelChoice | None:
    """The first funnel, in order of `costs` ((share of a direct scan, S, F, the shortlist's
    search parameters), cheapest first), whose rows for the `picked` gallery rows as queries
    (`funnel_rows(S, F, setting)`: k + 1 each, their own row among them) reach recall@k ≥
    `recall` against `truth` ([Q, k], their own rows left out); None when none does at ≤
    `max_cost_share`. Every engine's calibration (the local `calibrate`, Milvus's)."""
    for share, s, f, setting in costs:
        if share > max_cost_share:
            break
        reached = neighbour_recall(without_self(funnel_rows(s, f, setting), picked, k), truth)
        if reached >= recall:
            return FunnelChoice(s, f, reached, len(picked), share, setting)
    return None


def without_self(rows: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Each row's first k entries other than the query's own row."""
    return np.stack([r[r != q][:k] for r, q in zip(rows, queries, strict=True)])
