"""What the search engine shares with the scorer that finds its rows.

`SearchEngine` (service/engine/search.py) checks, embeds, rotates and routes a batch of
queries; its `Scorer` restricts each query to the rows it may return and plans it, scores the
rows and shapes the hits, and reads one row back for Explain. Two scorers exist: the bundle's
own FAISS files (service/engine/local_scorer.py) and a Milvus collection the version was
exported to (service/engine/milvus/scorer.py).

`PreparedQuery` is a query's state on its way through the batch; `StoredRow` is one gallery
row as a scorer reads it back, the item asked for by `check_item`; `EngineConfig` is what both
the engine and its scorer obey.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pydantic import ConfigDict, Field

from indexer.format.bundle import Bundle
from indexer.format.funnel_plans import FunnelConfig
from service.engine.filter_blocks import BLOCK_BUDGET
from service.engine.filtering import EXACT_MAX
from service.engine.metadata_filter import MetadataFilter
from service.engine.open_vocabulary import OpenVocabulary
from service.errors import NotFoundError, QueryError, ServiceError
from service.limits import LIMITS, RequestLimits, check_chars
from service.query.routing import Route
from service.results import FilterConcept, Hit, PlanRun, SearchQuery, SearchResult
from training.core.config import ConfigModel


class EngineConfig(ConfigModel):
    """`exact_max`: filtered searches allowing at most this many rows score them exactly;
    `filter_block_bytes`: the memory for frequent filters' allowed rows kept together
    (service/engine/filter_blocks.py; 0: none kept);
    `hit_concepts`: a hit's strongest concepts returned with explain; `limits`: what one
    request may ask for (service/limits.py); `funnel`: when "auto" funnels
    (service/engine/plans.py); `image_root`: the folder relative `image_path` values are resolved
    against (None: the one the bundle's cache recorded, else they are returned as stored:
    service/engine/hits.py)."""

    model_config = ConfigDict(frozen=True)

    exact_max: int = EXACT_MAX
    filter_block_bytes: int = Field(BLOCK_BUDGET, ge=0)
    hit_concepts: int = 5
    limits: RequestLimits = LIMITS
    funnel: FunnelConfig = FunnelConfig()
    image_root: Path | None = None


class RowRestriction(Protocol):
    """The rows a query may return, in its scorer's form: `AllowedRows` (a bitmap or row ids,
    indexer/format/row_bitmaps.py) for the local scorer, a filter expression for Milvus
    (service/engine/milvus/scorer.py); `count` the rows it allows (None: not counted)."""

    @property
    def count(self) -> int | None: ...


@dataclass
class PreparedQuery:
    """A validated query on its way through the batch."""

    query: SearchQuery
    embedding: np.ndarray | None = None
    error: ServiceError | None = None
    route: Route | None = None
    length: int = 0  # the prefix length its route searches (the contract's), set with route
    setting: str = ""  # search parameters other than the index's own (operating_points.py)
    allowed: RowRestriction | None = None  # the rows it may return (None: every row)
    plan: PlanRun | None = None
    image: Any = None  # the decoded PIL image, between decoding and encoding
    groups: list[int] | None = None  # group_by: each hit's group code (MetadataFilter.group_keys)
    result: SearchResult | None = None
    warnings: list[str] = field(default_factory=list)  # said with the answer (filtering.py)
    filter_concepts: list[FilterConcept] = field(default_factory=list)  # how each was made


def query_result(
    p: PreparedQuery, hits: list[Hit], metadata: MetadataFilter, version: int
) -> SearchResult:
    """A prepared query's answer from its hits, as either scorer gives it: each hit labelled
    with its group (group_by), and the route, prefix, plan and filter size the query ran with."""
    assert p.route is not None
    if p.groups is not None:
        _, labels = metadata.group_keys(p.query.group_by)
        for hit, code in zip(hits, p.groups, strict=True):
            hit.group = str(labels[code])
    return SearchResult(
        granularity=p.route.granularity,
        prefix_length=p.length,
        routing_reason=p.route.reason,
        hits=hits,
        filtered_rows=None if p.allowed is None else p.allowed.count,
        bundle_version=version,
        plan=p.plan,
    )


def check_item(
    item_id: str | None, row: int | None, bundle: Bundle, limits: RequestLimits
) -> int | None:
    """An Explain's item as asked, by its id or by its row (one of them; QueryError for
    neither or both): None for an id, checked to be non-empty and within `limits.id_chars`
    (QueryError; the scorer finds it, or raises NotFoundError); else the row, checked to lie
    in the bundle (NotFoundError)."""
    if (item_id is None) == (row is None):
        raise QueryError("name the item by its id or by its row, one of them")
    if item_id is not None:
        if not item_id:
            raise QueryError("empty item id")
        check_chars("an item id", item_id, limits.id_chars)
        return None
    if not 0 <= int(row) < bundle.rows:  # type: ignore[arg-type]
        raise NotFoundError(f"row {row} outside [0, {bundle.rows}) of {bundle.name}")
    return int(row)  # type: ignore[arg-type]


@dataclass(frozen=True)
class StoredRow:
    """One gallery row read back for Explain: its code (axis concepts and activations; its
    active word concepts where the scorer's store keeps them) and its stored p_L by length."""

    row: int
    item_id: str
    axes: tuple[np.ndarray, np.ndarray]
    words: tuple[np.ndarray, np.ndarray] | None
    prefixes: dict[int, np.ndarray]


class Scorer(Protocol):
    """Where a bundle version's rows are scored (module docstring). A scorer whose store does
    not answer raises `UnavailableError`: from `search`, the whole batch fails with it."""

    metadata: MetadataFilter  # the version's metadata table: conditions checked, groups coded
    metadata_fields: list[str]  # the fields a query may ask hits to carry
    vocabulary: OpenVocabulary | None  # a phrase the catalog lacks, made a zero-shot concept
    follows_alias: bool  # a Milvus alias: new versions come by following it, not a hot swap

    def moved_to(self) -> str | None:
        """The collection its alias names now, where it follows one that moved off its own;
        else None (service/serving/alias_follower.py)."""

    def restrict(self, prepared: PreparedQuery) -> None:
        """Set the rows a checked and routed query may return (`prepared.allowed`) and its
        plan at its prefix `prepared.length` (`prepared.plan`); QueryError for a filter or plan
        it refuses."""

    def search(self, live: Sequence[PreparedQuery], rotated: np.ndarray) -> None:
        """Set every live query's result (`prepared.result`), its rotated embedding a row of
        `rotated`."""

    def stored_row(self, item_id: str | None, row: int | None) -> StoredRow:
        """The row of an item id, or a row checked to exist; NotFoundError otherwise."""

    def nearest_rows(
        self, length: int, rotated: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) of the `k` rows nearest at prefix `length`, padded with row −1."""
