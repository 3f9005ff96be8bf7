"""A batch's searches, the same for every scorer (service/engine/scoring.py): queries that
can share one engine call are searched together, the others one by one, and a grouped query
(`group_by`) widens its own search group by group (service/engine/grouping.py). A scorer
supplies only how it searches: which queries share a call (`BatchSearch.together_key`), the
call for several (`together`), and the search of one query for k hits (`one`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol, TypeVar

import numpy as np

from service.engine.grouping import Ranked, grouped_search
from service.engine.metadata_filter import MetadataFilter
from service.engine.scoring import PreparedQuery

Found = TypeVar("Found")


class BatchSearch(Protocol[Found]):
    """How a scorer searches (module docstring); `Found` is its form of one query's hits."""

    def together_key(self, p: PreparedQuery) -> Hashable | None:
        """What queries searched in one call share (None: this one is searched alone)."""

    def together(self, members: Sequence[PreparedQuery], rotated: np.ndarray) -> list[Found]:
        """Each member's hits (its own k of them) from one call for rotated queries [M, D]."""

    def one(self, p: PreparedQuery, rotated: np.ndarray, k: int) -> Found:
        """One query's k best hits by its plan (rotated [1, D])."""

    def grouped(self, p: PreparedQuery, rotated: np.ndarray) -> Found:
        """A grouped query's hits (`grouped_hits` over its own `one`)."""


def batch_search(
    search: BatchSearch[Found], live: Sequence[PreparedQuery], rotated: np.ndarray
) -> dict[int, Found]:
    """Every live query's hits by its position in `live` (module docstring)."""
    together: dict[Hashable, list[int]] = defaultdict(list)
    found: dict[int, Found] = {}
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
