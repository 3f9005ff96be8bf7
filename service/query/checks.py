"""What a query must be before the engine embeds it: one kind of input, a known granularity,
fields and filters within the request limits (service/limits.py), an input of the right shape.

Pure functions of the query and what the engine serves (its limits, metadata fields, dimension
and encoder); each raises a `QueryError` naming the fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from service.errors import EncoderUnavailableError, QueryError, echo
from service.limits import (
    RequestLimits,
    check_chars,
    check_conditions,
    check_fields,
    check_filter,
)
from service.results import (
    MAX_FACTOR,
    MAX_GROUP_SIZE,
    MAX_K,
    MAX_SHORTLIST,
    PLAN_KINDS,
    SCOPES,
    PlanKind,
    SearchPlan,
    SearchQuery,
)
from training.core.granularity import Granularity, GranularityError, parse_granularity


def requested_granularity(value: Granularity | str) -> Granularity | None:
    """The requested granularity; None for AUTO (or empty); QueryError for any other name
    (training/core/granularity.py's one parser and message)."""
    try:
        return parse_granularity(value, auto=True)
    except GranularityError as exc:
        raise QueryError(str(exc)) from None


def check_query(
    query: SearchQuery,
    limits: RequestLimits,
    metadata_fields: Sequence[str],
    dim: int,
    encoder: Any,
    missing_encoder: str | None = None,
) -> np.ndarray | None:
    """A search query as the engine can serve it (the input itself: `check_query_input`, whose
    unit vector it returns)."""
    kinds = query.kinds
    if not kinds:
        raise QueryError("the query is empty: give a text, an image or a vector")
    if len(kinds) > 1:
        raise QueryError(f"give one of text, image or vector, not {' and '.join(kinds)}")
    if not isinstance(query.k, int) or not 1 <= query.k <= MAX_K:
        raise QueryError(f"top_k must lie in [1, {MAX_K}], got {query.k}")
    if query.scope not in SCOPES:
        raise QueryError(
            f"unknown concept scope {echo(query.scope)}; choose from {', '.join(SCOPES)}"
        )
    if query.explain and query.k > limits.explain_hits:
        raise QueryError(f"explain covers at most {limits.explain_hits} hits; top_k is {query.k}")
    check_plan(query.plan, query.k)
    check_filter([*query.require, *query.exclude], limits)
    check_fields(query.metadata_fields, limits)
    check_conditions(query.where, limits)
    unknown = [f for f in query.metadata_fields if f not in metadata_fields and f != "id"]
    if unknown:
        shown = ", ".join(map(echo, unknown[:3])) + (", …" if len(unknown) > 3 else "")
        raise QueryError(
            f"unknown metadata field(s) {shown}; "
            f"the bundle has {', '.join(metadata_fields) or 'none'}"
        )
    return check_query_input(query, limits, dim, encoder, missing_encoder)


def check_grouping(query: SearchQuery, limits: RequestLimits) -> None:
    """group_by and group_size: a size in [1, MAX_GROUP_SIZE] only with a column, and at most
    MAX_K hits in all (top_k × group_size; with explain, the explain limit). Whether the bundle
    has the column is the engine's check (service/engine/metadata_filter.py)."""
    size = query.group_size
    if not query.group_by:
        if size is not None:
            raise QueryError("group_size needs group_by (a metadata column to group hits by)")
        return
    check_chars("a group_by field name", query.group_by, limits.field_chars)
    if size is None:
        return
    if not isinstance(size, int) or not 1 <= size <= MAX_GROUP_SIZE:
        raise QueryError(f"group_size must lie in [1, {MAX_GROUP_SIZE}], got {size}")
    most = limits.explain_hits if query.explain else MAX_K
    if query.k * size > most:
        raise QueryError(
            f"top_k × group_size = {query.k} × {size} hits; at most {most}"
            + (" with explain" if query.explain else "")
        )


def check_plan(plan: SearchPlan, k: int) -> None:
    """A plan's own fields: a known kind, a factor in [0, MAX_FACTOR] with k·F at most
    MAX_SHORTLIST, a prefix ≥ 0, and no funnel fields on a direct plan (the prefix is checked
    against the bundle's contract by the engine)."""
    if plan.kind not in PLAN_KINDS:
        choices = ", ".join(PLAN_KINDS)
        raise QueryError(f"unknown search plan {echo(plan.kind)}; choose from {choices}")
    if plan.kind == PlanKind.DIRECT and (plan.shortlist_prefix or plan.factor):
        raise QueryError("a direct plan takes no shortlist prefix or factor (ask for a funnel)")
    if not isinstance(plan.factor, int) or not 0 <= plan.factor <= MAX_FACTOR:
        raise QueryError(
            f"the funnel factor must lie in [1, {MAX_FACTOR}] (0: the server's), got {plan.factor}"
        )
    if plan.factor * k > MAX_SHORTLIST:
        raise QueryError(
            f"a funnel shortlist of top_k × factor = {k} × {plan.factor} rows; "
            f"at most {MAX_SHORTLIST}"
        )
    if not isinstance(plan.shortlist_prefix, int) or plan.shortlist_prefix < 0:
        raise QueryError(f"the shortlist prefix must be positive, got {plan.shortlist_prefix}")


def check_query_input(
    query: SearchQuery,
    limits: RequestLimits,
    dim: int,
    encoder: Any,
    missing_encoder: str | None = None,
) -> np.ndarray | None:
    """Its text, image or vector: non-empty, within the limits, servable by `encoder` (None:
    no encoder; `missing_encoder` says why, when the bundle's could not be loaded), a vector of
    `dim` finite values not all zero. A vector query's unit vector
    (float32, what the engine searches with: converted here once), else None."""
    if query.text is not None:
        if not query.text.strip():
            raise QueryError("empty text query")
        if len(query.text) > limits.text_chars:
            raise QueryError(
                f"text query of {len(query.text)} characters; at most {limits.text_chars}"
            )
        need_encoder(encoder, "text", missing_encoder)
    elif query.image is not None:
        if not query.image:
            raise QueryError("empty image query")
        encoder = need_encoder(encoder, "image", missing_encoder)
        if not encoder.has_image_tower:
            raise QueryError(
                f"the bundle's encoder {encoder.id} has no image tower: image queries need "
                "a bundle embedded with open_clip"
            )
    elif query.vector is not None:
        values = np.asarray(query.vector, dtype=np.float64)
        if values.ndim != 1 or len(values) != dim:
            raise QueryError(
                f"the vector has {values.size} values; the bundle's dimension is {dim}"
            )
        squares = float(values @ values)  # np.linalg.norm's own sum for a 1-D array
        if not np.isfinite(squares) and not np.isfinite(values).all():  # NaN or Inf spreads
            raise QueryError("the vector holds NaN or Inf")
        norm = np.sqrt(squares)
        if not norm > 0:
            raise QueryError("the vector is all zeros")
        # float64: a float32 norm overflows (values ~1e20) or underflows (~1e-23)
        return (values / norm).astype(np.float32)
    return None


def need_encoder(encoder: Any, kind: str, missing_encoder: str | None = None) -> Any:
    """`encoder`, or when the engine has none (vector queries only): EncoderUnavailableError
    (FAILED_PRECONDITION) naming the bundle's encoder that could not be loaded, or a QueryError
    for an engine opened without one."""
    if encoder is None:
        if missing_encoder is not None:
            raise EncoderUnavailableError(
                f"{kind} queries need the bundle's encoder, and {missing_encoder}; "
                "this server answers vector queries only"
            )
        raise QueryError(f"this engine has no encoder: {kind} queries are not served")
    return encoder
