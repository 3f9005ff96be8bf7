"""Search parameters tuned at build time to a recall target, and the operating points kept.

An approximate index (HNSW, IVF, IVF with an exact rerank) answers with a recall that depends on
its search parameters and on the rows it holds: efSearch = 128 reaches recall@10 0.99 at 50k
rows and 0.90 at 1M. So every build (and every add or delete, whose index holds other rows)
measures, for each approximate prefix index, a ladder of settings and keeps

- the operating points: the settings on the recall/latency Pareto front (no other setting is
  both faster and at least as accurate), each with its recall@k and its median single-query
  latency on the machine that built it;
- the chosen setting: the fastest operating point whose recall reaches the target (default
  recall@10 ≥ 0.95) with margin — its lower bound recall − 2·σ/√Q, σ the spread of the Q
  queries' recalls, does; when none does, the most accurate one, and the record says so.

Recall is measured on Q held-out gallery rows used as queries (leave one out): each query is a
stored row p_L(x_i), its own row is dropped from both answers, and

    recall@k = |approx_k(q) ∩ exact_k(q)| / k,   averaged over the queries,

exact_k the top k by inner product over every row at the same prefix L (brute force over the
exact vectors the bundle keeps: the index's own flat storage, or a longer prefix's, cut to L and
renormalised, since p_L = p_M[:L] / ‖p_M[:L]‖ for M ≥ L). A prefix whose exact vectors the
bundle does not keep at any length ≥ L (an on-disk IVF-PQ with no longer exact prefix) is not
tuned: it keeps the default setting, and the record says why.

The ladders (each stops early once a setting reaches RECALL_CEILING, or the recall stops rising):
efSearch ∈ {16, 24, …, 2048} for HNSW; nprobe ∈ {1, 2, 4, …, nlist} for IVF; and for IVF with
a rerank, that nprobe ladder for each k_factor ∈ {1, 2, 4, 8, 16}.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import faiss
import numpy as np

from indexer.format.served.mapped import EF_LADDER as EF_LADDER  # the ladders' rungs
from indexer.format.served.params import SearchParams
from indexer.format.served_index import ServedIndex, served
from indexer.format.store import VectorStore
from training.core.metrics import neighbour_recall, prefix_vectors

log = logging.getLogger(__name__)

RECALL_TARGET = 0.95
TUNING_K = 10
TUNING_QUERIES = 256
RECALL_CEILING = 0.999  # a ladder stops at the first setting that reaches this
PLATEAU = 0.001  # ... or when two steps in a row gain less recall than this
LATENCY_QUERIES = 64  # queries timed one at a time per setting (median)
EXACT_BLOCK = 65_536  # rows scored per block by the brute-force search
RELEASE_QUERIES = 16  # queries between two releases of a store on disk (measure)


RowBlock = Callable[[int, int], np.ndarray]  # (start, stop) → exact p_L rows [stop − start, L]


@dataclass(frozen=True)
class OperatingPoint:
    """One setting (a FAISS ParameterSpace string), its recall@k, the lower bound
    recall − 2·σ/√Q of that estimate (σ the spread of the queries' recalls), and its median
    latency (ms)."""

    search: str
    recall: float
    latency_ms: float
    recall_low: float = 0.0


@dataclass
class Tuning:
    """What the tuning of one prefix index found (recorded in the manifest's prefix entry)."""

    target: float
    k: int
    queries: int
    recall: float  # of the chosen setting (the entry's `search`)
    latency_ms: float
    seconds: float  # the tuning's wall time
    points: list[OperatingPoint] = field(default_factory=list)
    status: str = "tuned"  # tuned | below target | untuned
    note: str = ""
    chosen: str = ""  # the chosen setting (also the prefix entry's `search`)

    @classmethod
    def from_dict(cls, data: dict) -> Tuning:
        points = [OperatingPoint(**p) for p in data.get("points", [])]
        return cls(**{**data, "points": points})

    def point_for(self, min_recall: float) -> OperatingPoint | None:
        """The fastest operating point whose recall's lower bound reaches `min_recall`; None
        when none does."""
        reaching = [p for p in self.points if p.recall_low >= min_recall]
        return min(reaching, key=lambda p: p.latency_ms) if reaching else None

    @property
    def best(self) -> OperatingPoint | None:
        return max(self.points, key=lambda p: p.recall) if self.points else None


def untuned(note: str) -> Tuning:
    return Tuning(RECALL_TARGET, TUNING_K, 0, 0.0, 0.0, 0.0, [], "untuned", note)


# --- the mathematics -------------------------------------------------------------------------


def pareto_front(points: Sequence[OperatingPoint]) -> list[OperatingPoint]:
    """The points no other beats on both axes, fastest first (recall strictly rising)."""
    front: list[OperatingPoint] = []
    for point in sorted(points, key=lambda p: (p.latency_ms, -p.recall)):
        if not front or point.recall > front[-1].recall:
            front.append(point)
    return front


def choose(points: Sequence[OperatingPoint], target: float) -> tuple[OperatingPoint, str]:
    """The fastest point whose recall's lower bound reaches the target ('tuned'), else the most
    accurate ('below target'). The bound, not the estimate: the point just past the target on
    Q sampled queries would miss it on others about half the time."""
    reaching = [p for p in points if p.recall_low >= target]
    if reaching:
        return min(reaching, key=lambda p: p.latency_ms), "tuned"
    return max(points, key=lambda p: (p.recall, -p.latency_ms)), "below target"


def drop_self(found: np.ndarray, selves: np.ndarray, k: int) -> np.ndarray:
    """[Q, k] of [Q, k + 1] answers without each query's own row (the first k others)."""
    out = np.full((len(found), k), -1, dtype=np.int64)
    for i, (row, me) in enumerate(zip(found, selves, strict=True)):
        others = row[row != me][:k]
        out[i, : len(others)] = others
    return out


def exact_neighbours(rows: RowBlock, n: int, queries: np.ndarray, k: int) -> np.ndarray:
    """Top-k row ids [Q, k] by inner product over rows 0 .. n−1, read block by block (ties:
    lower row first)."""
    best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_rows = np.zeros((len(queries), 0), dtype=np.int64)
    for start in range(0, n, EXACT_BLOCK):
        stop = min(n, start + EXACT_BLOCK)
        scores = queries @ np.ascontiguousarray(rows(start, stop), dtype=np.float32).T
        ids = np.broadcast_to(np.arange(start, stop, dtype=np.int64), scores.shape)
        scores = np.concatenate([best_scores, scores], axis=1)
        ids = np.concatenate([best_rows, ids], axis=1)
        keep = min(k, scores.shape[1])
        part = np.argpartition(-scores, keep - 1, axis=1)[:, :keep]
        best_scores = np.take_along_axis(scores, part, axis=1)
        best_rows = np.take_along_axis(ids, part, axis=1)
    order = np.lexsort((best_rows, -best_scores), axis=1)
    return np.take_along_axis(best_rows, order, axis=1)


def held_out_rows(n: int, count: int, seed: int) -> np.ndarray:
    """The gallery rows a tuning uses as queries (sorted, distinct)."""
    return np.sort(np.random.default_rng([seed, 18]).choice(n, size=count, replace=False))


# --- measuring -------------------------------------------------------------------------------


def measure(
    index: ServedIndex, setting: str, queries: np.ndarray, selves: np.ndarray, exact: np.ndarray
) -> OperatingPoint:
    """Recall@k of one setting (batched searches) and its median single-query latency. Codes
    reranked from a store on disk let the store go every RELEASE_QUERIES queries, outside the
    timing: with the page cache's large folios a rerank maps far more than its rows, and a
    ladder's reranks would otherwise map most of the store. Each of their timed queries is run
    once untimed first, so that the time is the setting's work and not its page faults, which
    depend on what the settings measured before it left in the page cache (timed, they left a
    10M-row ladder one point on its front: nprobe=32, k_factor_rf=16, 160 reranks a query)."""
    k = exact.shape[1]
    index.apply(setting)
    store = index.store  # codes reranked from a store: the store they read
    step = RELEASE_QUERIES if store is not None and store.on_disk else len(queries)
    found = []
    for start in range(0, len(queries), step):
        found.append(index.search(queries[start : start + step], k + 1)[1])
        let_go(store)
    answers = drop_self(np.concatenate(found), selves, k)
    per_query = np.array(
        [neighbour_recall(a[None], e[None]) for a, e in zip(answers, exact, strict=True)]
    )
    recall = float(per_query.mean())
    low = recall - 2 * float(per_query.std()) / np.sqrt(len(per_query))
    params = SearchParams.parse(setting)
    times = []
    for number, query in enumerate(queries[:LATENCY_QUERIES], start=1):
        if store is not None and store.on_disk:
            index.search(query[None, :], k + 1, params)  # its pages, untimed
        started = time.perf_counter()
        index.search(query[None, :], k + 1, params)
        times.append(time.perf_counter() - started)
        if number % step == 0:
            let_go(store)
    let_go(store)
    ms = round(float(np.median(times)) * 1e3, 4)
    return OperatingPoint(setting, round(recall, 4), ms, round(low, 4))


def let_go(store: VectorStore | None) -> None:
    """Drop a store on disk from this process's resident set (VectorStore.release)."""
    if store is not None and store.on_disk:
        store.release()


def climb(measured: Callable[[str], OperatingPoint], ladder: Sequence[str]) -> list[OperatingPoint]:
    """Measure a ladder bottom up; stop at RECALL_CEILING or when recall plateaus."""
    points: list[OperatingPoint] = []
    for setting in ladder:
        points.append(measured(setting))
        if points[-1].recall >= RECALL_CEILING:
            break
        if len(points) >= 3 and points[-1].recall - points[-3].recall < PLATEAU:
            break
    return points


def tune_index(
    index: faiss.Index | ServedIndex,
    rows: RowBlock,
    target: float = RECALL_TARGET,
    queries: int = TUNING_QUERIES,
    k: int = TUNING_K,
    seed: int = 0,
) -> Tuning:
    """Tune one approximate index over n = index.ntotal rows whose exact p_L vectors `rows`
    gives; leaves the chosen setting applied to the index."""
    index = served(index)
    started = time.perf_counter()
    n = int(index.ntotal)
    count = min(queries, n - 1)
    if count < 1 or n <= k:
        return untuned(f"{n} rows: too few to tune at k = {k}")
    selves = held_out_rows(n, count, seed)
    vectors = np.concatenate([rows(int(i), int(i) + 1) for i in selves]).astype(np.float32)
    exact = drop_self(exact_neighbours(rows, n, vectors, k + 1), selves, k)
    points = []
    for ladder in index.ladders():
        points += climb(lambda s: measure(index, s, vectors, selves, exact), ladder)
    if not points:
        return untuned(f"{index.kind_name} has no tunable parameters")
    front = pareto_front(points)
    chosen, status = choose(front, target)
    index.apply(chosen.search)
    return Tuning(
        target=target,
        k=k,
        queries=count,
        recall=chosen.recall,
        latency_ms=chosen.latency_ms,
        seconds=round(time.perf_counter() - started, 3),
        points=front,
        status=status,
        chosen=chosen.search,
    )


def exact_rows(indexes: dict[int, faiss.Index | ServedIndex], length: int) -> RowBlock | None:
    """A reader of the exact p_L rows: the prefix's own flat storage, else the shortest longer
    prefix's that has one, cut to L and renormalised; None when no index keeps them."""
    for source in sorted(m for m in indexes if m >= length):
        storage = served(indexes[source]).exact
        if storage is None:
            continue
        if source == length:
            return lambda start, stop, s=storage: s.reconstruct_n(start, stop - start)
        return lambda start, stop, s=storage: prefix_vectors(
            s.reconstruct_n(start, stop - start), length
        )
    return None


def tune_prefixes(
    indexes: dict[int, ServedIndex],
    target: float = RECALL_TARGET,
    queries: int = TUNING_QUERIES,
    seed: int = 0,
) -> dict[int, Tuning]:
    """A Tuning for every approximate index of a version (prefix length → index, opened)."""
    tuned = {}
    for length, index in sorted(indexes.items()):
        if not index.approximate:
            continue
        rows = exact_rows(indexes, length)
        if rows is None:
            tuned[length] = untuned(
                "the bundle keeps no exact vectors at this or a longer prefix to measure against"
            )
            continue
        tuned[length] = tuning = tune_index(index, rows, target, queries, seed=seed)
        log.info(
            "prefix %d: recall@%d %.3f at %.3f ms (%s, %.1f s)",
            length,
            tuning.k,
            tuning.recall,
            tuning.latency_ms,
            tuning.status,
            tuning.seconds,
        )
    return tuned
