"""Requests as protobuf messages ↔ the plain values of service/results.py, both ways: queries,
granularities, concept references, plans, metadata conditions and scopes.

The client writes requests with these functions and the servicer reads them (responses are
service/api/grpc/responses.py's), so both ends agree by construction. `MAX_MESSAGE_BYTES` is
the size of a response message both ends accept.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from service._generated.strata.v1 import search_pb2 as pb
from service.errors import QueryError, echo
from service.limits import LIMITS, RequestLimits, check_count
from service.query.checks import requested_granularity
from service.results import (
    AUTO,
    DEFAULT_K,
    SCOPES,
    ConceptRef,
    MetadataCondition,
    MetadataRange,
    MetadataScalar,
    PlanRun,
    SearchPlan,
    SearchQuery,
)
from training.core.granularity import Granularity

MAX_MESSAGE_BYTES = 16 * 2**20  # responses (the server's send, a client's both ways)

_TO_PROTO = {
    AUTO: pb.GRANULARITY_AUTO,
    Granularity.OBJECT.value: pb.GRANULARITY_OBJECT,
    Granularity.ATTRIBUTE.value: pb.GRANULARITY_ATTRIBUTE,
    Granularity.RELATION.value: pb.GRANULARITY_RELATION,
    Granularity.CAPTION.value: pb.GRANULARITY_CAPTION,
    Granularity.FULL.value: pb.GRANULARITY_FULL,
}
_FROM_PROTO = {v: k for k, v in _TO_PROTO.items()} | {pb.GRANULARITY_UNSPECIFIED: AUTO}


def same_fields(source: object, names: tuple[str, ...]) -> dict[str, Any]:
    """`names` of `source` as keyword arguments (a message's or a value's, to build the other)."""
    return {name: getattr(source, name) for name in names}


# --- granularity and concept references -------------------------------------------------------


def granularity_to_proto(value: Granularity | str) -> int:
    """A granularity's enum value (AUTO or empty: GRANULARITY_AUTO); QueryError for any other
    name (service/query/checks.py's `requested_granularity`)."""
    granularity = requested_granularity(value)
    return _TO_PROTO[AUTO if granularity is None else granularity.value]


def granularity_from_proto(value: int) -> str:
    """ "auto" or a Granularity value; QueryError for a number outside the enum (proto3 enums
    are open: a client may send any int32)."""
    if value not in _FROM_PROTO:
        known = ", ".join(f"{n} ({pb.Granularity.Name(n)})" for n in sorted(_FROM_PROTO))
        raise QueryError(f"granularity {value} is out of range; known values: {known}")
    return _FROM_PROTO[value]


def routed_granularity(value: int) -> Granularity:
    """The granularity a response says was searched (never auto)."""
    return Granularity(_FROM_PROTO[value])


def concept_ref_to_proto(ref: ConceptRef) -> pb.ConceptRef:
    if ref.id is not None:
        return pb.ConceptRef(id=ref.id)
    if ref.label is not None:
        return pb.ConceptRef(label=ref.label)
    return pb.ConceptRef(name=ref.name or "")


def concept_ref_from_proto(message: pb.ConceptRef) -> ConceptRef:
    which = message.WhichOneof("ref")
    if which is None:
        raise QueryError("a concept reference sets none of id, label or name")
    return ConceptRef(**{which: getattr(message, which)})


# --- queries ----------------------------------------------------------------------------------


def query_to_proto(query: SearchQuery) -> pb.Query:
    if query.text is not None:
        return pb.Query(text=query.text)
    if query.image is not None:
        return pb.Query(image=query.image)
    if query.vector is not None:
        return pb.Query(vector=pb.FloatVector(values=list(query.vector)))
    return pb.Query()


def query_fields(message: pb.Query) -> dict[str, object]:
    """The SearchQuery fields of a Query message (none when no kind is set)."""
    which = message.WhichOneof("kind")
    if which == "vector":  # through numpy's buffer read: 13 µs for 512 values, not 31
        return {"vector": tuple(np.asarray(message.vector.values, dtype=np.float32).tolist())}
    if which is not None:
        return {which: getattr(message, which)}
    return {}


_PLAN_TO_PROTO = {
    AUTO: pb.PLAN_KIND_AUTO,
    "direct": pb.PLAN_KIND_DIRECT,
    "funnel": pb.PLAN_KIND_FUNNEL,
}
_PLAN_FROM_PROTO = {v: k for k, v in _PLAN_TO_PROTO.items()}
_PLAN_FIELDS = ("shortlist_prefix", "factor")


def plan_to_proto(plan: SearchPlan) -> pb.SearchPlan:
    if plan.kind not in _PLAN_TO_PROTO:
        choices = ", ".join(_PLAN_TO_PROTO)
        raise QueryError(f"unknown search plan {echo(plan.kind)}; choose from {choices}")
    return pb.SearchPlan(kind=_PLAN_TO_PROTO[plan.kind], **same_fields(plan, _PLAN_FIELDS))


def plan_from_proto(message: pb.SearchPlan) -> SearchPlan:
    """A request's plan; a kind outside the enum is kept as `<unknown plan N>`, which the
    engine's validation refuses naming it (INVALID_ARGUMENT)."""
    kind = _PLAN_FROM_PROTO.get(message.kind, f"<unknown plan {message.kind}>")
    return SearchPlan(kind, **same_fields(message, _PLAN_FIELDS))


def plan_run_to_proto(run: PlanRun) -> pb.PlanRun:
    return pb.PlanRun(
        kind=_PLAN_TO_PROTO[run.kind],
        reason=run.reason,
        **same_fields(run, (*_PLAN_FIELDS, "shortlist_rows")),
    )


def plan_run(message: pb.PlanRun) -> PlanRun:
    return PlanRun(
        _PLAN_FROM_PROTO[message.kind],
        message.reason,
        **same_fields(message, (*_PLAN_FIELDS, "shortlist_rows")),
    )


# --- metadata conditions --------------------------------------------------------------------


def value_to_proto(value: MetadataScalar) -> pb.MetadataValue:
    """A Python value as a MetadataValue (bool before int: a bool is an int in Python)."""
    if isinstance(value, bool):
        return pb.MetadataValue(flag=value)
    if isinstance(value, int):
        return pb.MetadataValue(integer=value)
    if isinstance(value, float):
        return pb.MetadataValue(number=value)
    if isinstance(value, str):
        return pb.MetadataValue(text=value)
    raise QueryError(
        f"a metadata value must be text, a number or a flag, got {type(value).__name__}"
    )


def value_from_proto(message: pb.MetadataValue, field: str) -> MetadataScalar:
    which = message.WhichOneof("kind")
    if which is None:
        raise QueryError(f"a value in the condition on {echo(field)} sets none of its kinds")
    return getattr(message, which)


def condition_to_proto(condition: MetadataCondition) -> pb.MetadataCondition:
    message = pb.MetadataCondition(field=condition.field)
    if condition.equals is not None:
        message.equals.CopyFrom(value_to_proto(condition.equals))
    elif condition.any_of is not None:
        message.any_of.CopyFrom(
            pb.MetadataValues(values=[value_to_proto(v) for v in condition.any_of])
        )
    elif condition.range is not None:
        span = condition.range
        message.range.CopyFrom(
            pb.MetadataRange(min_exclusive=span.min_exclusive, max_exclusive=span.max_exclusive)
        )
        if span.min is not None:
            message.range.min.CopyFrom(value_to_proto(span.min))
        if span.max is not None:
            message.range.max.CopyFrom(value_to_proto(span.max))
    return message


def condition_from_proto(message: pb.MetadataCondition) -> MetadataCondition:
    """A request's condition; one with no test set is kept without one, which the engine's
    validation refuses naming the field (INVALID_ARGUMENT)."""
    field, which = message.field, message.WhichOneof("test")
    if which == "equals":
        return MetadataCondition(field, equals=value_from_proto(message.equals, field))
    if which == "any_of":
        values = tuple(value_from_proto(v, field) for v in message.any_of.values)
        return MetadataCondition(field, any_of=values)
    if which == "range":
        span = message.range
        return MetadataCondition(
            field,
            range=MetadataRange(
                value_from_proto(span.min, field) if span.HasField("min") else None,
                value_from_proto(span.max, field) if span.HasField("max") else None,
                span.min_exclusive,
                span.max_exclusive,
            ),
        )
    return MetadataCondition(field)


def search_request(query: SearchQuery) -> pb.SearchRequest:
    return pb.SearchRequest(
        query=query_to_proto(query),
        granularity=granularity_to_proto(query.granularity),
        top_k=query.k,
        filter=pb.ConceptFilter(
            require=[concept_ref_to_proto(r) for r in query.require],
            exclude=[concept_ref_to_proto(r) for r in query.exclude],
            scope=scope_to_proto(query.scope),
        ),
        explain=query.explain,
        metadata_fields=list(query.metadata_fields),
        min_recall=query.min_recall,
        plan=plan_to_proto(query.plan),
        where=[condition_to_proto(c) for c in query.where],
        group_by=query.group_by,
        group_size=query.group_size,
    )


def search_query(message: pb.SearchRequest, limits: RequestLimits = LIMITS) -> SearchQuery:
    """The query of a request; the counts of its lists are checked first (the engine checks
    the rest of service/limits.py), so an oversized list is never converted."""
    refs = len(message.filter.require) + len(message.filter.exclude)
    check_count("concept references (require + exclude)", refs, limits.concept_refs)
    check_count("metadata fields", len(message.metadata_fields), limits.metadata_fields)
    check_count("metadata conditions", len(message.where), limits.conditions)
    for condition in message.where:
        if condition.WhichOneof("test") == "any_of":
            values = len(condition.any_of.values)
            check_count("values in one any_of", values, limits.condition_values)
    return SearchQuery(
        **query_fields(message.query),  # type: ignore[arg-type]
        granularity=granularity_from_proto(message.granularity),
        k=message.top_k if message.HasField("top_k") else DEFAULT_K,
        require=tuple(concept_ref_from_proto(r) for r in message.filter.require),
        exclude=tuple(concept_ref_from_proto(r) for r in message.filter.exclude),
        explain=message.explain,
        metadata_fields=tuple(message.metadata_fields),
        scope=scope_from_proto(message.filter.scope),
        min_recall=round(message.min_recall, 6) if message.HasField("min_recall") else None,
        plan=plan_from_proto(message.plan),
        where=tuple(condition_from_proto(c) for c in message.where),
        group_by=message.group_by,
        group_size=message.group_size if message.HasField("group_size") else None,
    )


def scope_to_proto(scope: str) -> int:
    """'any' | 'local' | 'global' → ConceptScope; QueryError naming any other value."""
    value = str(scope).strip().lower() or "any"
    if value not in SCOPES:
        raise QueryError(f"unknown concept scope {echo(scope)}; choose from {', '.join(SCOPES)}")
    return pb.ConceptScope.Value(f"CONCEPT_SCOPE_{value.upper()}")


def scope_from_proto(value: int) -> str:
    """ConceptScope → 'any' | 'local' | 'global'; an unknown number is INVALID_ARGUMENT."""
    try:
        return pb.ConceptScope.Name(value).removeprefix("CONCEPT_SCOPE_").lower()
    except ValueError:
        return f"<unknown scope {value}>"  # refused with its number by the engine's validation
