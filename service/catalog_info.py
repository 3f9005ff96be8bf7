"""The service's plain values for the catalog and the index: a concept as served, a page of
them, a prefix's index and the bundle's (moved out of service/results.py, which imports them
from here; the same dataclasses the client returns)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from training.core.granularity import Granularity


@dataclass
class ConceptInfo:
    """A catalog entry as served: name, score, runner-ups, frequency, examples, scope, and the
    rows of this bundle where the concept is active."""

    id: int
    label: str
    name: str
    score: float
    runner_ups: list[tuple[str, float]] = field(default_factory=list)
    frequency: float = 0.0
    examples: list[dict[str, Any]] = field(default_factory=list)
    scope: str | None = None
    active_rows: int = 0
    precision: float | None = None  # the name's held-out precision, where measured
    named: bool = True  # False: no name held up; `name` is the label
    zero_shot: bool = False  # a word concept without labels (its text direction's cosine)
    below_floor: bool = False  # not shown in explanations and listings (precision < floor)
    gallery_agreement: float | None = None  # with its name's text direction, on this gallery
    hidden_on_gallery: str = ""  # why the gallery hides what the floor would show ("": it does not)


@dataclass
class ConceptPage:
    concepts: list[ConceptInfo]
    next_page_token: str
    total_size: int


@dataclass(frozen=True)
class PrefixInfo:
    granularity: Granularity
    prefix_length: int
    factory: str
    kind: str
    on_disk: bool
    search_parameters: str
    tuned_recall: float | None = None  # 1 for an exact index; None: approximate, not tuned
    tuned_latency_ms: float | None = None
    recall_target: float | None = None


@dataclass
class IndexInfo:
    bundle_version: int
    bundle_name: str
    created_at: str
    rows: int
    dim: int
    k: int
    encoder: str
    modality: str
    prefixes: list[PrefixInfo]
    metadata_fields: list[str]
    concepts: int
    image_queries: bool
    metadata_schema: dict[str, str] = field(default_factory=dict)  # column → FIELD_TYPES or "other"

    @property
    def contract(self) -> dict[Granularity, int]:
        return {p.granularity: p.prefix_length for p in self.prefixes}


def concept_text(name: str, label: str, zero_shot: bool = False) -> str:
    """How a concept reads in a listing: "dog (+12)", or just "+12" when it is unnamed (its
    name is its label); a zero-shot word "giraffe (zero-shot)"."""
    if zero_shot:
        return f"{name} (zero-shot)"
    return label if name == label else f"{name} ({label})"
