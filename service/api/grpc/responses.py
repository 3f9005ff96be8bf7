"""Responses as protobuf messages ↔ the plain values of service/results.py, both ways: search
results and their hits, explanations and descriptions, concepts, catalog pages, index info.

The servicer writes responses with these functions and the client reads them (requests are
service/api/grpc/requests.py's), so both ends agree by construction.
"""

from __future__ import annotations

from service._generated.strata.v1 import search_pb2 as pb
from service.api.grpc.requests import (
    granularity_to_proto,
    plan_run,
    plan_run_to_proto,
    routed_granularity,
    same_fields,
)
from service.results import (
    ConceptActivation,
    ConceptInfo,
    ConceptPage,
    Description,
    Explanation,
    FilterConcept,
    Hit,
    IndexInfo,
    NearCaption,
    PrefixInfo,
    PrefixSimilarity,
    SearchResult,
    SharedConcept,
)

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
    "below_floor",
    "hidden_on_gallery",
)
_INDEX_FIELDS = (
    "bundle_version",
    "bundle_name",
    "created_at",
    "rows",
    "dim",
    "k",
    "encoder",
    "modality",
    "concepts",
    "image_queries",
)
_PREFIX_FIELDS = ("prefix_length", "factory", "kind", "on_disk", "search_parameters")
_TUNED_FIELDS = ("tuned_recall", "tuned_latency_ms", "recall_target")  # optional: unset = None

# --- results ----------------------------------------------------------------------------------


def _active(c: ConceptActivation) -> pb.ActiveConcept:
    return pb.ActiveConcept(
        id=c.id,
        label=c.label,
        name=c.name,
        activation=c.activation,
        scope=c.scope or "",
        zero_shot=c.zero_shot,
    )


def _active_back(m: pb.ActiveConcept) -> ConceptActivation:
    return ConceptActivation(m.id, m.label, m.name, m.activation, m.scope or None, m.zero_shot)


def _shared(c: SharedConcept) -> pb.SharedConcept:
    return pb.SharedConcept(
        id=c.id,
        label=c.label,
        name=c.name,
        query_activation=c.query_activation,
        item_activation=c.item_activation,
        contribution=c.contribution,
        scope=c.scope or "",
        zero_shot=c.zero_shot,
    )


def _shared_back(m: pb.SharedConcept) -> SharedConcept:
    return SharedConcept(
        m.id,
        m.label,
        m.name,
        m.query_activation,
        m.item_activation,
        m.contribution,
        m.scope or None,
        m.zero_shot,
    )


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
    if result.warnings:
        response.warnings.extend(result.warnings)
    if result.filter_concepts:
        response.filter_concepts.extend(
            pb.FilterConcept(reference=f.reference, role=f.role, made=f.made)
            for f in result.filter_concepts
        )
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
        warnings=list(message.warnings),
        filter_concepts=[
            FilterConcept(f.reference, f.role, f.made) for f in message.filter_concepts
        ],
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
        gallery_agreement=info.gallery_agreement,
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
        gallery_agreement=(
            message.gallery_agreement if message.HasField("gallery_agreement") else None
        ),
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
