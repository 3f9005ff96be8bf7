"""A batch's searches by their plans, written once for every engine (service/engine/scoring.py).

Queries that can share one engine call are searched together, the others one by one; a funnel
plan shortlists k·F rows at its prefix S and reranks them exactly at the target L
(indexer/format/funnel.py); a grouped query (`group_by`) widens its own search group by group
(service/engine/grouping.py). An engine supplies only what differs (`EngineRows`):

    shares_call(p)                      what queries searched in one call share: their
                                        restriction (None: this query is searched alone)
    search_rows(members, rotated, L, k, …)
                                        each member's k best rows at prefix L inside its
                                        restriction (a bitmap, an expression), as `RowHits`
    rerank_rows(shortlist, L)           where a shortlist's exact p_L rows are read back from
                                        (the bundle's exact rows; the vectors Milvus returned)
    search_cap                          the most rows one search returns
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from indexer.format.funnel import RerankRows, pad_hits, rerank
from service.engine.grouping import Ranked, grouped_search
from service.engine.metadata_filter import MetadataFilter
from service.engine.scoring import PreparedQuery
from service.results import PlanKind


@dataclass(frozen=True)
class RowHits:
    """One query's hits: scores [k] and rows [k] (rows −1, scores −inf past the last hit), and
    the fields an engine returned with its rows, by row (Milvus's entities; empty for an engine
    that reads them from the bundle)."""

    scores: np.ndarray
    rows: np.ndarray
    fields: dict[int, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def padded(
        cls, scores: np.ndarray, rows: np.ndarray, k: int, fields: dict | None = None
    ) -> RowHits:
        padded_scores, padded_rows = pad_hits(
            np.asarray(scores, np.float32).reshape(-1), np.asarray(rows, np.int64).reshape(-1), k
        )
        return cls(padded_scores[0], padded_rows[0], fields or {})

    def top(self, k: int) -> RowHits:
        return RowHits(self.scores[:k], self.rows[:k], self.fields)

    @property
    def ranked(self) -> Ranked:
        """(scores [1, k], rows [1, k]), FAISS's shape."""
        return self.scores[None, :], self.rows[None, :]


class EngineRows(Protocol):
    """What an engine supplies under the plans (module docstring)."""

    search_cap: int

    def shares_call(self, p: PreparedQuery) -> Hashable | None:
        """What queries searched in one call share besides prefix, setting and plan (None: this
        one is searched alone)."""

    def search_rows(
        self,
        members: Sequence[PreparedQuery],
        rotated: np.ndarray,
        length: int,
        k: int,
        setting: str,
        rerank_at: int | None = None,
    ) -> list[RowHits]:
        """Each member's k best rows at prefix `length` (rotated [M, D]; members share their
        restriction), with search parameters `setting`; `rerank_at`: the rows are a funnel's
        shortlist to be reranked at that target (the engine brings what `rerank_rows` reads)."""

    def rerank_rows(self, shortlist: RowHits, length: int) -> RerankRows:
        """Where the exact p_L of a shortlist's rows are read back from."""


class PlannedSearch:
    """An engine's searches by plan (module docstring): `batch_search`'s calls."""

    def __init__(self, engine: EngineRows, metadata: MetadataFilter, rows: int) -> None:
        self.engine, self.metadata, self.rows = engine, metadata, rows

    def together_key(self, p: PreparedQuery) -> Hashable | None:
        assert p.plan is not None
        shared = self.engine.shares_call(p)
        if shared is None:
            return None
        return p.length, p.setting, shared, p.plan.shortlist_prefix, p.plan.factor

    def together(self, members: Sequence[PreparedQuery], rotated: np.ndarray) -> list[RowHits]:
        k = max(p.query.k for p in members)
        found = self._planned(members, rotated, k)
        return [hits.top(p.query.k) for hits, p in zip(found, members, strict=True)]

    def one(self, p: PreparedQuery, rotated: np.ndarray, k: int) -> RowHits:
        return self._planned([p], rotated, k)[0]

    def _planned(
        self, members: Sequence[PreparedQuery], rotated: np.ndarray, k: int
    ) -> list[RowHits]:
        """Each member's k best rows by their (shared) plan: direct, or a funnel's shortlist
        at S reranked exactly at the target."""
        first = members[0]
        assert first.plan is not None
        length, engine = first.length, self.engine
        if first.plan.kind != PlanKind.FUNNEL:
            return engine.search_rows(members, rotated, length, k, first.setting)
        plan = first.plan
        shortlisted = min(k * plan.factor, engine.search_cap)
        shortlists = engine.search_rows(
            members, rotated, plan.shortlist_prefix, shortlisted, first.setting, length
        )
        found = []
        for j, shortlist in enumerate(shortlists):
            scores, rows = rerank(
                engine.rerank_rows(shortlist, length), rotated[j], shortlist.rows, length, k
            )
            found.append(RowHits(scores[0], rows[0], shortlist.fields))
        return found

    def grouped(self, p: PreparedQuery, rotated: np.ndarray) -> RowHits:
        """A grouped query's hits (`grouped_hits` over its own `one`)."""
        assert p.plan is not None
        fields: dict[int, dict[str, Any]] = {}

        def ranked(k: int) -> Ranked:
            hits = self.one(p, rotated, k)
            fields.update(hits.fields)
            return RowHits.padded(hits.scores, hits.rows, k).ranked

        cap = self.engine.search_cap
        if p.plan.kind == PlanKind.FUNNEL:
            cap //= p.plan.factor
        scores, rows = grouped_hits(p, self.metadata, ranked, self.rows, cap)
        return RowHits(scores[0], rows[0], fields)


def batch_search(
    search: PlannedSearch, live: Sequence[PreparedQuery], rotated: np.ndarray
) -> dict[int, RowHits]:
    """Every live query's hits by its position in `live` (module docstring)."""
    together: dict[Hashable, list[int]] = defaultdict(list)
    found: dict[int, RowHits] = {}
    for i, p in enumerate(live):
        assert p.plan is not None
        if p.query.group_by:
            found[i] = search.grouped(p, rotated[i : i + 1])
            continue
        key = search.together_key(p)
        if key is None:
            found[i] = search.one(p, rotated[i : i + 1], p.query.k)
        else:
            together[key].append(i)
    for members in together.values():
        answers = search.together([live[i] for i in members], rotated[members])
        for i, answer in zip(members, answers, strict=True):
            found[i] = answer
    return found


def grouped_hits(
    p: PreparedQuery,
    metadata: MetadataFilter,
    ranked: Callable[[int], Ranked],
    rows: int,
    cap: int,
) -> Ranked:
    """A grouped query's ranked rows, widened group by group (service/engine/grouping.py) over
    `ranked(k)` (its own search for k hits), its rows' group codes kept in `p.groups`; `rows`
    the gallery's, `cap` the most one search may fetch."""
    assert p.plan is not None
    codes, _ = metadata.group_keys(p.query.group_by)
    available = rows if p.allowed is None or p.allowed.count is None else p.allowed.count
    scores, found, p.groups = grouped_search(
        ranked, codes, p.query.k, p.query.group_size or 1, available, max(cap, 1)
    )
    return scores[None, :], found[None, :]
