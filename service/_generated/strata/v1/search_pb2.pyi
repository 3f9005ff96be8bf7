from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Granularity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GRANULARITY_UNSPECIFIED: _ClassVar[Granularity]
    GRANULARITY_OBJECT: _ClassVar[Granularity]
    GRANULARITY_ATTRIBUTE: _ClassVar[Granularity]
    GRANULARITY_RELATION: _ClassVar[Granularity]
    GRANULARITY_CAPTION: _ClassVar[Granularity]
    GRANULARITY_FULL: _ClassVar[Granularity]
    GRANULARITY_AUTO: _ClassVar[Granularity]

class ConceptScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONCEPT_SCOPE_ANY: _ClassVar[ConceptScope]
    CONCEPT_SCOPE_LOCAL: _ClassVar[ConceptScope]
    CONCEPT_SCOPE_GLOBAL: _ClassVar[ConceptScope]

class PlanKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PLAN_KIND_AUTO: _ClassVar[PlanKind]
    PLAN_KIND_DIRECT: _ClassVar[PlanKind]
    PLAN_KIND_FUNNEL: _ClassVar[PlanKind]
GRANULARITY_UNSPECIFIED: Granularity
GRANULARITY_OBJECT: Granularity
GRANULARITY_ATTRIBUTE: Granularity
GRANULARITY_RELATION: Granularity
GRANULARITY_CAPTION: Granularity
GRANULARITY_FULL: Granularity
GRANULARITY_AUTO: Granularity
CONCEPT_SCOPE_ANY: ConceptScope
CONCEPT_SCOPE_LOCAL: ConceptScope
CONCEPT_SCOPE_GLOBAL: ConceptScope
PLAN_KIND_AUTO: PlanKind
PLAN_KIND_DIRECT: PlanKind
PLAN_KIND_FUNNEL: PlanKind

class FloatVector(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class Query(_message.Message):
    __slots__ = ("text", "image", "vector")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    text: str
    image: bytes
    vector: FloatVector
    def __init__(self, text: _Optional[str] = ..., image: _Optional[bytes] = ..., vector: _Optional[_Union[FloatVector, _Mapping]] = ...) -> None: ...

class ConceptRef(_message.Message):
    __slots__ = ("id", "label", "name")
    ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    id: int
    label: str
    name: str
    def __init__(self, id: _Optional[int] = ..., label: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ConceptFilter(_message.Message):
    __slots__ = ("require", "exclude", "scope")
    REQUIRE_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    require: _containers.RepeatedCompositeFieldContainer[ConceptRef]
    exclude: _containers.RepeatedCompositeFieldContainer[ConceptRef]
    scope: ConceptScope
    def __init__(self, require: _Optional[_Iterable[_Union[ConceptRef, _Mapping]]] = ..., exclude: _Optional[_Iterable[_Union[ConceptRef, _Mapping]]] = ..., scope: _Optional[_Union[ConceptScope, str]] = ...) -> None: ...

class SearchPlan(_message.Message):
    __slots__ = ("kind", "shortlist_prefix", "factor")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SHORTLIST_PREFIX_FIELD_NUMBER: _ClassVar[int]
    FACTOR_FIELD_NUMBER: _ClassVar[int]
    kind: PlanKind
    shortlist_prefix: int
    factor: int
    def __init__(self, kind: _Optional[_Union[PlanKind, str]] = ..., shortlist_prefix: _Optional[int] = ..., factor: _Optional[int] = ...) -> None: ...

class PlanRun(_message.Message):
    __slots__ = ("kind", "reason", "shortlist_prefix", "factor", "shortlist_rows")
    KIND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SHORTLIST_PREFIX_FIELD_NUMBER: _ClassVar[int]
    FACTOR_FIELD_NUMBER: _ClassVar[int]
    SHORTLIST_ROWS_FIELD_NUMBER: _ClassVar[int]
    kind: PlanKind
    reason: str
    shortlist_prefix: int
    factor: int
    shortlist_rows: int
    def __init__(self, kind: _Optional[_Union[PlanKind, str]] = ..., reason: _Optional[str] = ..., shortlist_prefix: _Optional[int] = ..., factor: _Optional[int] = ..., shortlist_rows: _Optional[int] = ...) -> None: ...

class MetadataValue(_message.Message):
    __slots__ = ("text", "integer", "number", "flag")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    INTEGER_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    text: str
    integer: int
    number: float
    flag: bool
    def __init__(self, text: _Optional[str] = ..., integer: _Optional[int] = ..., number: _Optional[float] = ..., flag: _Optional[bool] = ...) -> None: ...

class MetadataValues(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[MetadataValue]
    def __init__(self, values: _Optional[_Iterable[_Union[MetadataValue, _Mapping]]] = ...) -> None: ...

class MetadataRange(_message.Message):
    __slots__ = ("min", "max", "min_exclusive", "max_exclusive")
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    MIN_EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    MAX_EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    min: MetadataValue
    max: MetadataValue
    min_exclusive: bool
    max_exclusive: bool
    def __init__(self, min: _Optional[_Union[MetadataValue, _Mapping]] = ..., max: _Optional[_Union[MetadataValue, _Mapping]] = ..., min_exclusive: _Optional[bool] = ..., max_exclusive: _Optional[bool] = ...) -> None: ...

class MetadataCondition(_message.Message):
    __slots__ = ("field", "equals", "any_of", "range")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    EQUALS_FIELD_NUMBER: _ClassVar[int]
    ANY_OF_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    field: str
    equals: MetadataValue
    any_of: MetadataValues
    range: MetadataRange
    def __init__(self, field: _Optional[str] = ..., equals: _Optional[_Union[MetadataValue, _Mapping]] = ..., any_of: _Optional[_Union[MetadataValues, _Mapping]] = ..., range: _Optional[_Union[MetadataRange, _Mapping]] = ...) -> None: ...

class SearchRequest(_message.Message):
    __slots__ = ("query", "granularity", "top_k", "filter", "explain", "metadata_fields", "plan", "min_recall", "where", "group_by", "group_size")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    GRANULARITY_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELDS_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    MIN_RECALL_FIELD_NUMBER: _ClassVar[int]
    WHERE_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    GROUP_SIZE_FIELD_NUMBER: _ClassVar[int]
    query: Query
    granularity: Granularity
    top_k: int
    filter: ConceptFilter
    explain: bool
    metadata_fields: _containers.RepeatedScalarFieldContainer[str]
    plan: SearchPlan
    min_recall: float
    where: _containers.RepeatedCompositeFieldContainer[MetadataCondition]
    group_by: str
    group_size: int
    def __init__(self, query: _Optional[_Union[Query, _Mapping]] = ..., granularity: _Optional[_Union[Granularity, str]] = ..., top_k: _Optional[int] = ..., filter: _Optional[_Union[ConceptFilter, _Mapping]] = ..., explain: _Optional[bool] = ..., metadata_fields: _Optional[_Iterable[str]] = ..., plan: _Optional[_Union[SearchPlan, _Mapping]] = ..., min_recall: _Optional[float] = ..., where: _Optional[_Iterable[_Union[MetadataCondition, _Mapping]]] = ..., group_by: _Optional[str] = ..., group_size: _Optional[int] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ("granularity", "prefix_length", "routing_reason", "hits", "query_concepts", "filtered_rows", "bundle_version", "plan", "warnings", "filter_concepts")
    GRANULARITY_FIELD_NUMBER: _ClassVar[int]
    PREFIX_LENGTH_FIELD_NUMBER: _ClassVar[int]
    ROUTING_REASON_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    QUERY_CONCEPTS_FIELD_NUMBER: _ClassVar[int]
    FILTERED_ROWS_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_VERSION_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    FILTER_CONCEPTS_FIELD_NUMBER: _ClassVar[int]
    granularity: Granularity
    prefix_length: int
    routing_reason: str
    hits: _containers.RepeatedCompositeFieldContainer[Hit]
    query_concepts: _containers.RepeatedCompositeFieldContainer[ActiveConcept]
    filtered_rows: int
    bundle_version: int
    plan: PlanRun
    warnings: _containers.RepeatedScalarFieldContainer[str]
    filter_concepts: _containers.RepeatedCompositeFieldContainer[FilterConcept]
    def __init__(self, granularity: _Optional[_Union[Granularity, str]] = ..., prefix_length: _Optional[int] = ..., routing_reason: _Optional[str] = ..., hits: _Optional[_Iterable[_Union[Hit, _Mapping]]] = ..., query_concepts: _Optional[_Iterable[_Union[ActiveConcept, _Mapping]]] = ..., filtered_rows: _Optional[int] = ..., bundle_version: _Optional[int] = ..., plan: _Optional[_Union[PlanRun, _Mapping]] = ..., warnings: _Optional[_Iterable[str]] = ..., filter_concepts: _Optional[_Iterable[_Union[FilterConcept, _Mapping]]] = ...) -> None: ...

class FilterConcept(_message.Message):
    __slots__ = ("reference", "role", "made")
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MADE_FIELD_NUMBER: _ClassVar[int]
    reference: str
    role: str
    made: str
    def __init__(self, reference: _Optional[str] = ..., role: _Optional[str] = ..., made: _Optional[str] = ...) -> None: ...

class Hit(_message.Message):
    __slots__ = ("id", "score", "row", "metadata", "concepts", "shared_concepts", "group")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CONCEPTS_FIELD_NUMBER: _ClassVar[int]
    SHARED_CONCEPTS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    id: str
    score: float
    row: int
    metadata: _containers.ScalarMap[str, str]
    concepts: _containers.RepeatedCompositeFieldContainer[ActiveConcept]
    shared_concepts: _containers.RepeatedCompositeFieldContainer[SharedConcept]
    group: str
    def __init__(self, id: _Optional[str] = ..., score: _Optional[float] = ..., row: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ..., concepts: _Optional[_Iterable[_Union[ActiveConcept, _Mapping]]] = ..., shared_concepts: _Optional[_Iterable[_Union[SharedConcept, _Mapping]]] = ..., group: _Optional[str] = ...) -> None: ...

class ActiveConcept(_message.Message):
    __slots__ = ("id", "label", "name", "activation", "scope", "zero_shot")
    ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    ZERO_SHOT_FIELD_NUMBER: _ClassVar[int]
    id: int
    label: str
    name: str
    activation: float
    scope: str
    zero_shot: bool
    def __init__(self, id: _Optional[int] = ..., label: _Optional[str] = ..., name: _Optional[str] = ..., activation: _Optional[float] = ..., scope: _Optional[str] = ..., zero_shot: _Optional[bool] = ...) -> None: ...

class SharedConcept(_message.Message):
    __slots__ = ("id", "label", "name", "query_activation", "item_activation", "contribution", "scope", "zero_shot")
    ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUERY_ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    ITEM_ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    CONTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    ZERO_SHOT_FIELD_NUMBER: _ClassVar[int]
    id: int
    label: str
    name: str
    query_activation: float
    item_activation: float
    contribution: float
    scope: str
    zero_shot: bool
    def __init__(self, id: _Optional[int] = ..., label: _Optional[str] = ..., name: _Optional[str] = ..., query_activation: _Optional[float] = ..., item_activation: _Optional[float] = ..., contribution: _Optional[float] = ..., scope: _Optional[str] = ..., zero_shot: _Optional[bool] = ...) -> None: ...

class BatchSearchRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[SearchRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[SearchRequest, _Mapping]]] = ...) -> None: ...

class BatchSearchResponse(_message.Message):
    __slots__ = ("responses", "bundle_version")
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_VERSION_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[SearchResponse]
    bundle_version: int
    def __init__(self, responses: _Optional[_Iterable[_Union[SearchResponse, _Mapping]]] = ..., bundle_version: _Optional[int] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ("query", "item_id", "row", "near_captions")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    NEAR_CAPTIONS_FIELD_NUMBER: _ClassVar[int]
    query: Query
    item_id: str
    row: int
    near_captions: int
    def __init__(self, query: _Optional[_Union[Query, _Mapping]] = ..., item_id: _Optional[str] = ..., row: _Optional[int] = ..., near_captions: _Optional[int] = ...) -> None: ...

class NearCaption(_message.Message):
    __slots__ = ("id", "row", "text", "cosine")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    COSINE_FIELD_NUMBER: _ClassVar[int]
    id: str
    row: int
    text: str
    cosine: float
    def __init__(self, id: _Optional[str] = ..., row: _Optional[int] = ..., text: _Optional[str] = ..., cosine: _Optional[float] = ...) -> None: ...

class Description(_message.Message):
    __slots__ = ("phrase", "captions")
    PHRASE_FIELD_NUMBER: _ClassVar[int]
    CAPTIONS_FIELD_NUMBER: _ClassVar[int]
    phrase: str
    captions: _containers.RepeatedCompositeFieldContainer[NearCaption]
    def __init__(self, phrase: _Optional[str] = ..., captions: _Optional[_Iterable[_Union[NearCaption, _Mapping]]] = ...) -> None: ...

class PrefixSimilarity(_message.Message):
    __slots__ = ("granularity", "prefix_length", "cosine")
    GRANULARITY_FIELD_NUMBER: _ClassVar[int]
    PREFIX_LENGTH_FIELD_NUMBER: _ClassVar[int]
    COSINE_FIELD_NUMBER: _ClassVar[int]
    granularity: Granularity
    prefix_length: int
    cosine: float
    def __init__(self, granularity: _Optional[_Union[Granularity, str]] = ..., prefix_length: _Optional[int] = ..., cosine: _Optional[float] = ...) -> None: ...

class ExplainResponse(_message.Message):
    __slots__ = ("item_id", "row", "similarities", "shared_concepts", "query_concepts", "item_concepts", "bundle_version", "query_description", "item_description")
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    SIMILARITIES_FIELD_NUMBER: _ClassVar[int]
    SHARED_CONCEPTS_FIELD_NUMBER: _ClassVar[int]
    QUERY_CONCEPTS_FIELD_NUMBER: _ClassVar[int]
    ITEM_CONCEPTS_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_VERSION_FIELD_NUMBER: _ClassVar[int]
    QUERY_DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ITEM_DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    row: int
    similarities: _containers.RepeatedCompositeFieldContainer[PrefixSimilarity]
    shared_concepts: _containers.RepeatedCompositeFieldContainer[SharedConcept]
    query_concepts: _containers.RepeatedCompositeFieldContainer[ActiveConcept]
    item_concepts: _containers.RepeatedCompositeFieldContainer[ActiveConcept]
    bundle_version: int
    query_description: Description
    item_description: Description
    def __init__(self, item_id: _Optional[str] = ..., row: _Optional[int] = ..., similarities: _Optional[_Iterable[_Union[PrefixSimilarity, _Mapping]]] = ..., shared_concepts: _Optional[_Iterable[_Union[SharedConcept, _Mapping]]] = ..., query_concepts: _Optional[_Iterable[_Union[ActiveConcept, _Mapping]]] = ..., item_concepts: _Optional[_Iterable[_Union[ActiveConcept, _Mapping]]] = ..., bundle_version: _Optional[int] = ..., query_description: _Optional[_Union[Description, _Mapping]] = ..., item_description: _Optional[_Union[Description, _Mapping]] = ...) -> None: ...

class ListConceptsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "name_contains", "include_below_floor")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NAME_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_BELOW_FLOOR_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    name_contains: str
    include_below_floor: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., name_contains: _Optional[str] = ..., include_below_floor: _Optional[bool] = ...) -> None: ...

class ListConceptsResponse(_message.Message):
    __slots__ = ("concepts", "next_page_token", "total_size")
    CONCEPTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    concepts: _containers.RepeatedCompositeFieldContainer[Concept]
    next_page_token: str
    total_size: int
    def __init__(self, concepts: _Optional[_Iterable[_Union[Concept, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total_size: _Optional[int] = ...) -> None: ...

class GetConceptRequest(_message.Message):
    __slots__ = ("concept",)
    CONCEPT_FIELD_NUMBER: _ClassVar[int]
    concept: ConceptRef
    def __init__(self, concept: _Optional[_Union[ConceptRef, _Mapping]] = ...) -> None: ...

class GetConceptResponse(_message.Message):
    __slots__ = ("concepts",)
    CONCEPTS_FIELD_NUMBER: _ClassVar[int]
    concepts: _containers.RepeatedCompositeFieldContainer[Concept]
    def __init__(self, concepts: _Optional[_Iterable[_Union[Concept, _Mapping]]] = ...) -> None: ...

class NamedScore(_message.Message):
    __slots__ = ("name", "score")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    name: str
    score: float
    def __init__(self, name: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class ConceptExample(_message.Message):
    __slots__ = ("id", "activation", "text")
    ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    id: str
    activation: float
    text: str
    def __init__(self, id: _Optional[str] = ..., activation: _Optional[float] = ..., text: _Optional[str] = ...) -> None: ...

class Concept(_message.Message):
    __slots__ = ("id", "label", "name", "score", "runner_ups", "frequency", "examples", "scope", "active_rows", "precision", "named", "zero_shot", "below_floor", "gallery_agreement", "hidden_on_gallery")
    ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    RUNNER_UPS_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_ROWS_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    NAMED_FIELD_NUMBER: _ClassVar[int]
    ZERO_SHOT_FIELD_NUMBER: _ClassVar[int]
    BELOW_FLOOR_FIELD_NUMBER: _ClassVar[int]
    GALLERY_AGREEMENT_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_ON_GALLERY_FIELD_NUMBER: _ClassVar[int]
    id: int
    label: str
    name: str
    score: float
    runner_ups: _containers.RepeatedCompositeFieldContainer[NamedScore]
    frequency: float
    examples: _containers.RepeatedCompositeFieldContainer[ConceptExample]
    scope: str
    active_rows: int
    precision: float
    named: bool
    zero_shot: bool
    below_floor: bool
    gallery_agreement: float
    hidden_on_gallery: str
    def __init__(self, id: _Optional[int] = ..., label: _Optional[str] = ..., name: _Optional[str] = ..., score: _Optional[float] = ..., runner_ups: _Optional[_Iterable[_Union[NamedScore, _Mapping]]] = ..., frequency: _Optional[float] = ..., examples: _Optional[_Iterable[_Union[ConceptExample, _Mapping]]] = ..., scope: _Optional[str] = ..., active_rows: _Optional[int] = ..., precision: _Optional[float] = ..., named: _Optional[bool] = ..., zero_shot: _Optional[bool] = ..., below_floor: _Optional[bool] = ..., gallery_agreement: _Optional[float] = ..., hidden_on_gallery: _Optional[str] = ...) -> None: ...

class GetIndexInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MetadataField(_message.Message):
    __slots__ = ("name", "type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ...) -> None: ...

class PrefixIndex(_message.Message):
    __slots__ = ("granularity", "prefix_length", "factory", "kind", "on_disk", "search_parameters", "tuned_recall", "tuned_latency_ms", "recall_target")
    GRANULARITY_FIELD_NUMBER: _ClassVar[int]
    PREFIX_LENGTH_FIELD_NUMBER: _ClassVar[int]
    FACTORY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ON_DISK_FIELD_NUMBER: _ClassVar[int]
    SEARCH_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    TUNED_RECALL_FIELD_NUMBER: _ClassVar[int]
    TUNED_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    RECALL_TARGET_FIELD_NUMBER: _ClassVar[int]
    granularity: Granularity
    prefix_length: int
    factory: str
    kind: str
    on_disk: bool
    search_parameters: str
    tuned_recall: float
    tuned_latency_ms: float
    recall_target: float
    def __init__(self, granularity: _Optional[_Union[Granularity, str]] = ..., prefix_length: _Optional[int] = ..., factory: _Optional[str] = ..., kind: _Optional[str] = ..., on_disk: _Optional[bool] = ..., search_parameters: _Optional[str] = ..., tuned_recall: _Optional[float] = ..., tuned_latency_ms: _Optional[float] = ..., recall_target: _Optional[float] = ...) -> None: ...

class GetIndexInfoResponse(_message.Message):
    __slots__ = ("bundle_version", "bundle_name", "created_at", "rows", "dim", "k", "encoder", "modality", "prefixes", "metadata_fields", "concepts", "image_queries", "metadata_schema")
    BUNDLE_VERSION_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_NAME_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    ENCODER_FIELD_NUMBER: _ClassVar[int]
    MODALITY_FIELD_NUMBER: _ClassVar[int]
    PREFIXES_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELDS_FIELD_NUMBER: _ClassVar[int]
    CONCEPTS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_QUERIES_FIELD_NUMBER: _ClassVar[int]
    METADATA_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    bundle_version: int
    bundle_name: str
    created_at: str
    rows: int
    dim: int
    k: int
    encoder: str
    modality: str
    prefixes: _containers.RepeatedCompositeFieldContainer[PrefixIndex]
    metadata_fields: _containers.RepeatedScalarFieldContainer[str]
    concepts: int
    image_queries: bool
    metadata_schema: _containers.RepeatedCompositeFieldContainer[MetadataField]
    def __init__(self, bundle_version: _Optional[int] = ..., bundle_name: _Optional[str] = ..., created_at: _Optional[str] = ..., rows: _Optional[int] = ..., dim: _Optional[int] = ..., k: _Optional[int] = ..., encoder: _Optional[str] = ..., modality: _Optional[str] = ..., prefixes: _Optional[_Iterable[_Union[PrefixIndex, _Mapping]]] = ..., metadata_fields: _Optional[_Iterable[str]] = ..., concepts: _Optional[int] = ..., image_queries: _Optional[bool] = ..., metadata_schema: _Optional[_Iterable[_Union[MetadataField, _Mapping]]] = ...) -> None: ...
