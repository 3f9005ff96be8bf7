"""Protobuf messages ↔ the plain values of service/results.py, both ways.

The servicer reads requests and writes responses with these functions; the client writes
requests and reads responses with them, so both ends agree by construction.
"""

from __future__ import annotations

from typing import Any

from service._generated.strata.v1 import search_pb2 as pb
from service.errors import QueryError, echo
from service.limits import LIMITS, RequestLimits, check_count
from service.results import (
    AUTO,
    DEFAULT_K,
    SCOPES,
    ConceptActivation,
    ConceptInfo,
    ConceptPage,
    ConceptRef,
    Description,
    Explanation,
    Hit,
    IndexInfo,
    MetadataCondition,
    MetadataRange,
    MetadataScalar,
    NearCaption,
    PlanRun,
    PrefixInfo,
    PrefixSimilarity,
    SearchPlan,
    SearchQuery,
    SearchResult,
    SharedConcept,
)
from training.core.granularity import Granularity

MAX_MESSAGE_BYTES = 16 * 2**20  # responses (the server's send, a client's both ways)

# fields of the same name and meaning in a message and its value, copied as they are
_CONCEPT_FIELDS = (
    "id",
    "label",
    "name",
    "score",
    "frequency",
    "active_rows",
    "named",
    "zero_shot",
)
_INDEX_FIELDS = (
    "bundle_version", "bundle_name", "created_at", "rows", "dim", "k", "encoder", "modality",
    "concepts", "image_queries",
)  # fmt: skip
_PREFIX_FIELDS = ("prefix_length", "factory", "kind", "on_disk", "search_parameters")
_TUNED_FIELDS = ("tuned_recall", "tuned_latency_ms", "recall_target")  # optional: unset = None

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
    text = str(value).strip().lower() or AUTO
    if text not in _TO_PROTO:
        raise QueryError(f"unknown granularity {echo(value)}; choose from {', '.join(_TO_PROTO)}")
    return _TO_PROTO[text]


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
    if which == "vector":
        return {"vector": tuple(message.vector.values)}
    if which is not None:
        return {which: getattr(message, which)}
    return {}


_PLAN_TO_PROTO = {
    AUTO: pb.PLAN_KIND_AUTO, "direct": pb.PLAN_KIND_DIRECT, "funnel": pb.PLAN_KIND_FUNNEL,
}  # fmt: skip
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


# --- results ----------------------------------------------------------------------------------


def _active(c: ConceptActivation) -> pb.ActiveConcept:
    return pb.ActiveConcept(
        id=c.id, label=c.label, name=c.name, activation=c.activation, scope=c.scope or ""
    )


def _active_back(m: pb.ActiveConcept) -> ConceptActivation:
    return ConceptActivation(m.id, m.label, m.name, m.activation, m.scope or None)


def _shared(c: SharedConcept) -> pb.SharedConcept:
    return pb.SharedConcept(
        id=c.id, label=c.label, name=c.name, query_activation=c.query_activation,
        item_activation=c.item_activation, contribution=c.contribution, scope=c.scope or "",
    )  # fmt: skip


def _shared_back(m: pb.SharedConcept) -> SharedConcept:
    return SharedConcept(
        m.id, m.label, m.name, m.query_activation, m.item_activation, m.contribution,
        m.scope or None,
    )  # fmt: skip


def _hit(h: Hit) -> pb.Hit:
    """A hit's message; its metadata and concepts set only when it has some (an empty list or
    map given to the constructor costs as much as the rest of the hit)."""
    hit = pb.Hit(id=h.id, score=h.score, row=h.row, group=h.group)
    if h.metadata:
        hit.metadata.update(h.metadata)
    if h.concepts:
        hit.concepts.extend(_active(c) for c in h.concepts)
    if h.shared_concepts:
        hit.shared_concepts.extend(_shared(c) for c in h.shared_concepts)
    return hit


def search_response(result: SearchResult) -> pb.SearchResponse:
    response = pb.SearchResponse(
        granularity=granularity_to_proto(result.granularity),
        prefix_length=result.prefix_length,
        routing_reason=result.routing_reason,
        hits=[_hit(h) for h in result.hits],
        query_concepts=[_active(c) for c in result.query_concepts],
        bundle_version=result.bundle_version,
    )
    if result.filtered_rows is not None:
        response.filtered_rows = result.filtered_rows
    if result.plan is not None:
        response.plan.CopyFrom(plan_run_to_proto(result.plan))
    return response


def search_result(message: pb.SearchResponse) -> SearchResult:
    return SearchResult(
        granularity=routed_granularity(message.granularity),
        prefix_length=message.prefix_length,
        routing_reason=message.routing_reason,
        hits=[
            Hit(
                id=h.id,
                score=h.score,
                row=h.row,
                metadata=dict(h.metadata),
                concepts=[_active_back(c) for c in h.concepts],
                shared_concepts=[_shared_back(c) for c in h.shared_concepts],
                group=h.group,
            )
            for h in message.hits
        ],
        query_concepts=[_active_back(c) for c in message.query_concepts],
        filtered_rows=message.filtered_rows if message.HasField("filtered_rows") else None,
        bundle_version=message.bundle_version,
        plan=plan_run(message.plan) if message.HasField("plan") else None,
    )


def description_to_proto(description: Description) -> pb.Description:
    return pb.Description(
        phrase=description.phrase,
        captions=[
            pb.NearCaption(id=c.id, row=c.row, text=c.text, cosine=c.cosine)
            for c in description.captions
        ],
    )


def description(message: pb.Description) -> Description:
    return Description(
        message.phrase, [NearCaption(c.id, c.row, c.text, c.cosine) for c in message.captions]
    )


def explain_response(explanation: Explanation) -> pb.ExplainResponse:
    response = pb.ExplainResponse(
        item_id=explanation.item_id,
        row=explanation.row,
        similarities=[
            pb.PrefixSimilarity(
                granularity=granularity_to_proto(s.granularity),
                prefix_length=s.prefix_length,
                cosine=s.cosine,
            )
            for s in explanation.similarities
        ],
        shared_concepts=[_shared(c) for c in explanation.shared_concepts],
        query_concepts=[_active(c) for c in explanation.query_concepts],
        item_concepts=[_active(c) for c in explanation.item_concepts],
        bundle_version=explanation.bundle_version,
    )
    for name in ("query_description", "item_description"):
        value = getattr(explanation, name)
        if value is not None:
            getattr(response, name).CopyFrom(description_to_proto(value))
    return response


def explanation(message: pb.ExplainResponse) -> Explanation:
    return Explanation(
        item_id=message.item_id,
        row=message.row,
        similarities=[
            PrefixSimilarity(routed_granularity(s.granularity), s.prefix_length, s.cosine)
            for s in message.similarities
        ],
        shared_concepts=[_shared_back(c) for c in message.shared_concepts],
        query_concepts=[_active_back(c) for c in message.query_concepts],
        item_concepts=[_active_back(c) for c in message.item_concepts],
        bundle_version=message.bundle_version,
        **{
            name: description(getattr(message, name)) if message.HasField(name) else None
            for name in ("query_description", "item_description")
        },
    )


def concept_to_proto(info: ConceptInfo) -> pb.Concept:
    return pb.Concept(
        **same_fields(info, _CONCEPT_FIELDS),
        runner_ups=[pb.NamedScore(name=n, score=s) for n, s in info.runner_ups],
        examples=[
            pb.ConceptExample(
                id=str(e.get("id", "")),
                activation=float(e.get("activation", 0.0)),
                text=str(e.get("text", "")),
            )
            for e in info.examples
        ],
        scope=info.scope or "",
        precision=info.precision,
    )


def concept_info(message: pb.Concept) -> ConceptInfo:
    return ConceptInfo(
        **same_fields(message, _CONCEPT_FIELDS),
        runner_ups=[(r.name, r.score) for r in message.runner_ups],
        examples=[
            {"id": e.id, "activation": e.activation, **({"text": e.text} if e.text else {})}
            for e in message.examples
        ],
        scope=message.scope or None,
        precision=message.precision if message.HasField("precision") else None,
    )


def concept_page_response(page: ConceptPage) -> pb.ListConceptsResponse:
    return pb.ListConceptsResponse(
        concepts=[concept_to_proto(c) for c in page.concepts],
        next_page_token=page.next_page_token,
        total_size=page.total_size,
    )


def concept_page(message: pb.ListConceptsResponse) -> ConceptPage:
    return ConceptPage(
        concepts=[concept_info(c) for c in message.concepts],
        next_page_token=message.next_page_token,
        total_size=message.total_size,
    )


def index_info_response(info: IndexInfo) -> pb.GetIndexInfoResponse:
    return pb.GetIndexInfoResponse(
        **same_fields(info, _INDEX_FIELDS),
        prefixes=[
            pb.PrefixIndex(
                granularity=granularity_to_proto(p.granularity),
                **same_fields(p, _PREFIX_FIELDS),
                **{f: getattr(p, f) for f in _TUNED_FIELDS if getattr(p, f) is not None},
            )
            for p in info.prefixes
        ],
        metadata_fields=info.metadata_fields,
        metadata_schema=[
            pb.MetadataField(name=name, type=kind) for name, kind in info.metadata_schema.items()
        ],
    )


def index_info(message: pb.GetIndexInfoResponse) -> IndexInfo:
    return IndexInfo(
        **same_fields(message, _INDEX_FIELDS),
        prefixes=[
            PrefixInfo(
                granularity=routed_granularity(p.granularity),
                **same_fields(p, _PREFIX_FIELDS),
                **{f: getattr(p, f) if p.HasField(f) else None for f in _TUNED_FIELDS},
            )
            for p in message.prefixes
        ],
        metadata_fields=list(message.metadata_fields),
        metadata_schema={f.name: f.type for f in message.metadata_schema},
    )
