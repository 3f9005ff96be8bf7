"""Which search setting a query with `min_recall` gets: one of the index's operating points.

A bundle's approximate prefix indexes were tuned at build time (indexer/format/tuning.py): each has
its chosen setting (the manifest entry's `search`) and the operating points measured, each a
FAISS ParameterSpace string with its recall@k against exact search at that prefix, the lower
bound of that estimate, and its latency. A query asking for recall r gets

- nothing to change ("") when it asks no more than the chosen setting's bound, or the index is
  exact (Flat reaches recall 1);
- else the fastest operating point whose lower bound reaches r;
- else a QueryError (INVALID_ARGUMENT) naming the best recall the index has measured, or that
  it was never tuned: the engine does not silently answer below what was asked.
"""

from __future__ import annotations

import math

from indexer.format.manifest import PrefixEntry
from service.errors import QueryError


def check_min_recall(value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and 0 < value <= 1):
        raise QueryError(f"min_recall must lie in (0, 1], got {value}")


def setting_for(entry: PrefixEntry, min_recall: float | None) -> str:
    """The ParameterSpace string to search `entry`'s index with ("" = its own setting)."""
    if min_recall is None or entry.factory == "Flat":
        return ""
    tuning = entry.tuning
    if tuning is None or tuning.status == "untuned" or not tuning.points:
        why = f": {tuning.note}" if tuning is not None and tuning.note else ""
        raise QueryError(
            f"min_recall {min_recall}: the {entry.factory} index at prefix {entry.length} was "
            f"not tuned{why}; rebuild the bundle to measure its recall"
        )
    chosen = next((p for p in tuning.points if p.search == entry.search), None)
    if chosen is not None and chosen.recall_low >= min_recall:
        return ""
    point = tuning.point_for(min_recall)
    if point is None:
        best = max(tuning.points, key=lambda p: p.recall_low)
        raise QueryError(
            f"min_recall {min_recall}: the {entry.factory} index at prefix {entry.length} "
            f"reaches at most recall@{tuning.k} {best.recall_low:.3f} (lower bound; "
            f"{best.recall:.3f} measured, with {best.search}) on {tuning.queries} held-out rows"
        )
    return point.search
