"""The service's plain values: what a query asks and what the engine and the client return.

The engine (service/engine/search.py) takes `SearchQuery` and returns these dataclasses; the
servicer turns them into protobuf messages (service/api/grpc/requests.py, responses.py) and the
client back into the same dataclasses, so code written against the engine works unchanged against a
remote server. Nothing here imports numpy, FAISS or torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypedDict, Unpack

# the catalog's and the index's answers (service/catalog_info.py), importable from here too
from service.catalog_info import ConceptInfo as ConceptInfo
from service.catalog_info import ConceptPage as ConceptPage
from service.catalog_info import IndexInfo as IndexInfo
from service.catalog_info import PrefixInfo as PrefixInfo
from service.catalog_info import concept_text as concept_text
from service.errors import echo
from training.core.granularity import AUTO, Granularity, granularity_choices

GRANULARITY_CHOICES = granularity_choices(auto=True)
DEFAULT_K = 10
MAX_K = 1000


class Scope(StrEnum):
    """A concept filter's scope (CDS, `strata eval cds`): its references stand for concepts of
    this scope only ("any": every concept)."""

    ANY = "any"
    LOCAL = "local"
    GLOBAL = "global"


class PlanKind(StrEnum):
    """How a search finds its hits (service/engine/plans.py)."""

    AUTO = "auto"
    DIRECT = "direct"
    FUNNEL = "funnel"


SCOPES = tuple(s.value for s in Scope)
PLAN_KINDS = tuple(k.value for k in PlanKind)
MAX_FACTOR = 1000  # a funnel's shortlist factor F at most
MAX_SHORTLIST = 100_000  # a funnel's shortlist k·F at most
MAX_GROUP_SIZE = 100  # hits per group at most (group_by)
FIELD_TYPES = ("string", "integer", "number", "bool", "timestamp", "date")  # a column's, to test

MetadataScalar = str | int | float | bool  # a condition's value; timestamps and dates as ISO text


@dataclass(frozen=True)
class MetadataRange:
    """An interval of a column's values: an end left None is unbounded, a set end inclusive
    unless its `*_exclusive` flag is set."""

    min: MetadataScalar | None = None
    max: MetadataScalar | None = None
    min_exclusive: bool = False
    max_exclusive: bool = False

    def __str__(self) -> str:
        low = "(-∞" if self.min is None else ("(" if self.min_exclusive else "[") + repr(self.min)
        high = "∞)" if self.max is None else repr(self.max) + (")" if self.max_exclusive else "]")
        return f"{low}, {high}"


@dataclass(frozen=True)
class MetadataCondition:
    """One test on a metadata column: `equals` a value, is `any_of` several, or lies in a
    `range`; exactly one is set (the engine refuses others). A null value meets no test."""

    field: str
    equals: MetadataScalar | None = None
    any_of: tuple[MetadataScalar, ...] | None = None
    range: MetadataRange | None = None

    @property
    def tests(self) -> list[str]:
        """Which tests are set ("equals", "any_of", "range"): a valid condition has one."""
        return [
            name
            for name, value in (
                ("equals", self.equals),
                ("any_of", self.any_of),
                ("range", self.range),
            )
            if value is not None
        ]

    def __str__(self) -> str:
        if self.equals is not None:
            return f"{self.field} = {self.equals!r}"
        if self.any_of is not None:
            return f"{self.field} in ({', '.join(map(repr, self.any_of))})"
        if self.range is not None:
            return f"{self.field} in {self.range}"
        return f"{self.field} (no test)"


@dataclass(frozen=True)
class ConceptRef:
    """A concept of the catalog by signed id (2j = +axis j, 2j + 1 = −axis j), by label
    ("+j", "-j") or by name (every concept so named). Exactly one is set."""

    id: int | None = None
    label: str | None = None
    name: str | None = None

    @classmethod
    def parse(cls, value: ConceptRef | str | int) -> ConceptRef:
        """An int is an id; "+12", "-3" or "12" a label; any other string a name."""
        if isinstance(value, ConceptRef):
            return value
        if isinstance(value, int):
            return cls(id=value)
        text = str(value).strip()
        if text[:1] in ("+", "-") or text.isdigit():
            return cls(label=text)
        return cls(name=text)

    def __str__(self) -> str:
        if self.id is not None:
            return f"#{self.id}"
        return echo(self.label) if self.label is not None else echo(self.name)


@dataclass(frozen=True)
class SearchPlan:
    """How a search finds its hits: "direct" (one search of the target prefix's index),
    "funnel" (shortlist k·factor rows at `shortlist_prefix`, rerank them exactly at the target:
    indexer/format/funnel.py) or "auto" (the engine's choice). 0 leaves a funnel's shortlist prefix
    or factor to the engine; setting either asks for a funnel."""

    kind: PlanKind | str = PlanKind.AUTO  # a str only when unknown (refused by the checks)
    shortlist_prefix: int = 0
    factor: int = 0

    def __post_init__(self) -> None:  # parsed once, here: a known kind becomes its PlanKind
        if not isinstance(self.kind, PlanKind) and self.kind in PLAN_KINDS:
            object.__setattr__(self, "kind", PlanKind(self.kind))


@dataclass(frozen=True)
class PlanRun:
    """The plan a search ran, and why: for a funnel, the prefix of its shortlist, the factor F
    and the rows shortlisted (k·F, at most the rows there are)."""

    kind: PlanKind
    reason: str
    shortlist_prefix: int = 0
    factor: int = 0
    shortlist_rows: int = 0

    def describe(self, prefix_length: int) -> str:
        """One line: `funnel: 1000 rows at prefix 24, reranked exactly at 384 (reason)`."""
        if self.kind == PlanKind.FUNNEL:
            return (
                f"funnel: {self.shortlist_rows} rows at prefix {self.shortlist_prefix}, "
                f"reranked exactly at {prefix_length} ({self.reason})"
            )
        return f"direct at prefix {prefix_length} ({self.reason})"


class QueryOptions(TypedDict, total=False):
    """A search's options beside its query (text, image or vector) and its `where` conditions:
    the keywords `SearchQuery.of` and `StrataClient.search` both take, defined once here.
    Unset, each takes SearchQuery's default."""

    granularity: str
    k: int
    require: Sequence[ConceptRef | str | int]
    exclude: Sequence[ConceptRef | str | int]
    explain: bool
    metadata_fields: Sequence[str]
    scope: str
    min_recall: float | None
    plan: SearchPlan | str
    group_by: str
    group_size: int | None


@dataclass(frozen=True)
class SearchQuery:
    """One search: exactly one of text, image (encoded bytes) or vector (a raw embedding in the
    encoder's space); a granularity ("auto" or a Granularity value); k hits; concept filters;
    explain; metadata columns to return."""

    text: str | None = None
    image: bytes | None = None
    vector: Sequence[float] | None = None
    granularity: str = AUTO
    k: int = DEFAULT_K
    require: tuple[ConceptRef, ...] = ()
    exclude: tuple[ConceptRef, ...] = ()
    explain: bool = False
    metadata_fields: tuple[str, ...] = ()
    scope: Scope | str = Scope.ANY  # a str only when unknown (refused by the checks)
    min_recall: float | None = None  # recall@k to reach (indexer/format/tuning.py); None: as tuned
    plan: SearchPlan = SearchPlan()
    where: tuple[MetadataCondition, ...] = ()  # every one must hold (and the concept filter)
    group_by: str = ""  # a metadata column: top k groups of `group_size` hits; "": no groups
    group_size: int | None = None  # hits per group (None: 1); only with group_by

    def __post_init__(self) -> None:  # parsed once, here: a known scope becomes its Scope
        if not isinstance(self.scope, Scope) and self.scope in SCOPES:
            object.__setattr__(self, "scope", Scope(self.scope))

    @classmethod
    def of(
        cls,
        text: str | None = None,
        *,
        image: bytes | None = None,
        vector: Sequence[float] | None = None,
        where: Sequence[MetadataCondition] = (),
        **options: Unpack[QueryOptions],
    ) -> SearchQuery:
        """A query with concept references given as ids, labels or names; `plan` a SearchPlan
        or its kind ("auto", "direct", "funnel"); `where` metadata conditions (service/where.py
        parses them from text); the other options are `QueryOptions`' (TypeError for an
        unknown one)."""
        unknown = sorted(set(options) - set(QueryOptions.__annotations__))
        if unknown:
            raise TypeError(f"SearchQuery.of() got unknown options: {', '.join(unknown)}")
        plan = options.get("plan", AUTO)
        min_recall = options.get("min_recall")
        return cls(
            text=text,
            image=image,
            vector=None if vector is None else tuple(float(v) for v in vector),
            granularity=str(options.get("granularity", AUTO)),
            k=options.get("k", DEFAULT_K),
            require=tuple(ConceptRef.parse(r) for r in options.get("require", ())),
            exclude=tuple(ConceptRef.parse(r) for r in options.get("exclude", ())),
            explain=options.get("explain", False),
            metadata_fields=tuple(options.get("metadata_fields", ())),
            scope=str(options.get("scope", "any")),
            min_recall=None if min_recall is None else float(min_recall),
            plan=plan if isinstance(plan, SearchPlan) else SearchPlan(str(plan)),
            where=tuple(where),
            group_by=str(options.get("group_by", "")),
            group_size=options.get("group_size"),
        )

    @property
    def kinds(self) -> list[str]:
        """Which query fields are set ("text", "image", "vector"): valid queries have one."""
        return [
            name
            for name, value in (("text", self.text), ("image", self.image), ("vector", self.vector))
            if value is not None
        ]


@dataclass(frozen=True)
class ConceptActivation:
    """A concept among the k active ones of a vector; activation = |(U(x − b))_j| ≥ 0."""

    id: int
    label: str
    name: str
    activation: float
    scope: str | None = None  # local / global where CDS has scored the concept
    zero_shot: bool = False  # a word concept without labels, shown as it holds on the gallery


@dataclass(frozen=True)
class SharedConcept:
    """A concept active in both query and item; contribution = query × item activation, the
    concept's term in ⟨U(q − b), U(x − b)⟩ (see service/engine/explain.py), summed over the
    concepts of its name (the activations are those of the first, whose id it carries)."""

    id: int
    label: str
    name: str
    query_activation: float
    item_activation: float
    contribution: float
    scope: str | None = None  # local / global where CDS has scored the concept
    zero_shot: bool = False  # a word concept without labels, shown as it holds on the gallery


@dataclass
class Hit:
    id: str
    score: float
    row: int
    metadata: dict[str, str] = field(default_factory=dict)
    concepts: list[ConceptActivation] = field(default_factory=list)
    shared_concepts: list[SharedConcept] = field(default_factory=list)
    group: str = ""  # group_by only: the hit's value of the group_by column, as text


@dataclass(frozen=True)
class FilterConcept:
    """How one reference of a concept filter was made: "learnt" (a word concept's learnt
    readout row), "zero-shot" (a word or phrase from its text embedding, no labels) or "axis"
    (CEDAR axes so named or labelled)."""

    reference: str
    role: str  # require | exclude
    made: str


@dataclass
class SearchResult:
    granularity: Granularity
    prefix_length: int
    routing_reason: str
    hits: list[Hit]
    query_concepts: list[ConceptActivation] = field(default_factory=list)
    filtered_rows: int | None = None
    bundle_version: int = 0
    plan: PlanRun | None = None
    warnings: list[str] = field(default_factory=list)  # e.g. a filter concept below the floor
    filter_concepts: list[FilterConcept] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [h.id for h in self.hits]

    @property
    def groups(self) -> dict[str, list[Hit]]:
        """A grouped search's hits by group, best group first (hits come in that order)."""
        grouped: dict[str, list[Hit]] = {}
        for hit in self.hits:
            grouped.setdefault(hit.group, []).append(hit)
        return grouped


@dataclass(frozen=True)
class PrefixSimilarity:
    granularity: Granularity
    prefix_length: int
    cosine: float


@dataclass(frozen=True)
class NearCaption:
    """A gallery row near a code's reconstruction: its id, row, caption and s_D to x̂."""

    id: str
    row: int
    text: str
    cosine: float


@dataclass
class Description:
    """A sparse code in words (service/engine/descriptions.py): a phrase of its strongest named
    concepts ("" when none is named) and the gallery captions nearest to its reconstruction
    (empty unless asked for, and on a bundle without captions)."""

    phrase: str
    captions: list[NearCaption] = field(default_factory=list)


@dataclass
class Explanation:
    item_id: str
    row: int
    similarities: list[PrefixSimilarity]
    shared_concepts: list[SharedConcept]
    query_concepts: list[ConceptActivation]
    item_concepts: list[ConceptActivation]
    bundle_version: int = 0
    query_description: Description | None = None  # None: a server that does not describe
    item_description: Description | None = None

    def cosine(self, granularity: Granularity | str) -> float:
        """The similarity at one granularity's prefix."""
        for s in self.similarities:
            if s.granularity == granularity:
                return s.cosine
        raise KeyError(granularity)
