"""Grouped search (`SearchQuery.group_by`): top_k groups of a metadata column, each with its
`group_size` best hits, as Qdrant's group search returns them.

Groups are ranked by their best hit. Over a ranked list of hits, the first top_k distinct
groups are therefore the top_k groups, and a group's best hits are its first ones in the list;
so the search fetches a ranked list of `fetch` hits and widens it (×4 each time) until the
first top_k groups each hold group_size hits, or the allowed rows are all fetched, or the index
returned fewer hits than asked (an approximate index can give no more), or `fetch` reached the
cap (the funnel's shortlist limit over its factor, else `FETCH_MAX`) — then it answers with
what it has: fewer groups, or groups with fewer hits, only where the rows run out or, past the
cap, where more than FETCH_MAX rows would have to be ranked. Rows whose group value is null
belong to no group and are skipped. The search itself is the query's own plan, filtered or not
(service/engine/search.py), with k = fetch; scores stay s_L.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

FETCH_MAX = 100_000
WIDEN = 4

Ranked = tuple[np.ndarray, np.ndarray]  # (scores [1, k], rows [1, k]; −1 past the last hit)


def pick_groups(rows: np.ndarray, codes: np.ndarray, top: int, size: int) -> list[list[int]]:
    """Positions in `rows` (ranked, −1 past the end) of the first `top` groups' first `size`
    hits each, groups in order of their best hit; `codes` the group code of every table row
    (−1: no group)."""
    groups: dict[int, list[int]] = {}
    full = 0
    for position, row in enumerate(rows.tolist()):
        if row < 0:
            break
        code = int(codes[row])
        if code < 0:
            continue
        members = groups.get(code)
        if members is None:
            if len(groups) == top:
                continue
            members = groups[code] = []
        if len(members) < size:
            members.append(position)
            full += len(members) == size
            if full == top:
                break
    return list(groups.values())


def grouped_search(
    search: Callable[[int], Ranked],
    codes: np.ndarray,
    top: int,
    size: int,
    available: int,
    cap: int = FETCH_MAX,
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(scores, rows, group codes) of the hits of the top `top` groups, `size` hits each at
    most, flattened group by group; `search(k)` ranks k hits of the query's allowed rows
    (`available` of them). The widening is in the module docstring."""
    fetch = max(1, min(available, cap, top * size * WIDEN))
    while True:
        scores, rows = search(fetch)
        groups = pick_groups(rows[0], codes, top, size)
        complete = len(groups) == top and all(len(g) == size for g in groups)
        returned = int((rows[0] >= 0).sum())
        if complete or fetch >= min(available, cap) or returned < fetch:
            break
        fetch = min(available, cap, fetch * WIDEN)
    positions = [p for g in groups for p in g]
    kept_rows = rows[0][positions] if positions else np.zeros(0, np.int64)
    kept_scores = scores[0][positions] if positions else np.zeros(0, np.float32)
    return kept_scores, kept_rows, [int(codes[r]) for r in kept_rows]
