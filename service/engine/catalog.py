"""The concept catalog and the index's description, read from a loaded bundle.

    catalog_page(bundle, "dog", 100, "", limits)   # a page of the concepts that hold, by id
    find_concepts(bundle, "+12", limits)           # every concept a reference stands for
    zero_shot_info(bundle, concept)                # a phrase outside it (open_vocabulary.py)
    describe_index(bundle, metadata_fields, encoder)
    BundleCatalog(bundle)                          # ListConcepts / GetConcept, in process

Immutable data: the servicer answers these on the event loop, without the engine thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from indexer.format.bundle import Bundle
from indexer.format.manifest import PrefixEntry
from service.engine.filtering import resolve_ref
from service.engine.open_vocabulary import ZeroShotConcept
from service.errors import NotFoundError, QueryError, echo
from service.limits import RequestLimits, check_chars
from service.results import ConceptInfo, ConceptPage, ConceptRef, IndexInfo, PrefixInfo
from training.cedar.catalog import CatalogEntry
from training.cedar.concepts import ConceptCoder
from training.core.granularity import Granularity

DEFAULT_PAGE = 100
MAX_PAGE = 1000


def describe_concept(bundle: Bundle, entry: CatalogEntry) -> ConceptInfo:
    """A catalog entry and how many rows it is active in."""
    rows = bundle.concept_rows(entry.concept)
    return ConceptInfo(
        id=entry.concept,
        label=entry.label,
        name=entry.name,
        score=entry.score,
        runner_ups=list(entry.runner_ups),
        frequency=entry.frequency,
        examples=list(entry.examples),
        scope=entry.scope,
        active_rows=len(rows),
        precision=entry.precision,
        named=entry.named,
        zero_shot=entry.zero_shot,
        below_floor=not bundle.coder.holds(entry.concept),
        gallery_agreement=gallery_agreement(bundle.coder, entry.concept),
        hidden_on_gallery=bundle.coder.gallery_reason(entry.concept) or "",
    )


def gallery_agreement(coder: ConceptCoder, concept: int) -> float | None:
    """A concept's agreement on the bundle's gallery, None where it was not measured."""
    if coder.agreement is None or np.isnan(coder.agreement[concept]):
        return None
    return float(coder.agreement[concept])


def zero_shot_info(bundle: Bundle, concept: ZeroShotConcept) -> ConceptInfo:
    """A phrase the catalog lacks, as its zero-shot concept on this gallery
    (service/engine/open_vocabulary.py): no id (−1), no held-out precision nor training
    frequency, its active rows."""
    rows = concept.rows.count
    return ConceptInfo(
        id=-1,
        label=concept.phrase,
        name=concept.phrase,
        score=0.0,
        active_rows=rows,
        zero_shot=True,
        below_floor=bundle.coder.floor is not None,
    )


def catalog_page(
    bundle: Bundle,
    name_contains: str,
    page_size: int,
    page_token: str,
    limits: RequestLimits,
    include_below_floor: bool = False,
) -> ConceptPage:
    """A page of the catalog in id order, the concepts that hold only (`ConceptCoder.holds`)
    unless `include_below_floor`; `page_token` is the previous page's `next_page_token` (an
    offset), `page_size` 0 means 100."""
    size = page_size or DEFAULT_PAGE
    if not 1 <= size <= MAX_PAGE:
        raise QueryError(f"page_size must lie in [1, {MAX_PAGE}], got {page_size}")
    check_chars("name_contains", name_contains, limits.lookup_chars)
    check_chars("a page token", page_token, limits.lookup_chars)
    needle = name_contains.strip().lower()
    coder = bundle.coder
    matching = [
        e
        for e in coder.catalog
        if needle in e.name.lower() and (include_below_floor or coder.holds(e.concept))
    ]
    start = page_offset(page_token, len(matching))
    page = matching[start : start + size]
    following = start + len(page)
    return ConceptPage(
        concepts=[describe_concept(bundle, e) for e in page],
        next_page_token=str(following) if following < len(matching) else "",
        total_size=len(matching),
    )


def find_concepts(
    bundle: Bundle, ref: ConceptRef | str | int, limits: RequestLimits
) -> list[ConceptInfo]:
    """Every concept a reference stands for (a name: all so named, best score first)."""
    ref = ConceptRef.parse(ref)
    for value in (ref.name, ref.label):
        if value is not None:
            check_chars("a concept reference", value, limits.lookup_chars)
    try:
        ids = resolve_ref(bundle, ref, "the catalog")
    except QueryError as exc:
        raise NotFoundError(str(exc)) from None
    entries = sorted((bundle.coder.catalog[c] for c in ids), key=lambda e: -e.score)
    return [describe_concept(bundle, e) for e in entries]


class BundleCatalog:
    """A bundle's catalog behind the client's `list_concepts` / `get_concept` signatures, so
    `strata concepts` reads a bundle folder and a running server through one code path."""

    def __init__(self, bundle: Bundle, limits: RequestLimits | None = None) -> None:
        self.bundle = bundle
        self.limits = limits or RequestLimits()

    def list_concepts(
        self,
        name_contains: str = "",
        page_size: int = 0,
        page_token: str = "",
        include_below_floor: bool = False,
    ) -> ConceptPage:
        return catalog_page(
            self.bundle, name_contains, page_size, page_token, self.limits, include_below_floor
        )

    def get_concept(self, concept: ConceptRef | str | int) -> list[ConceptInfo]:
        return find_concepts(self.bundle, concept, self.limits)


def describe_index(bundle: Bundle, metadata_schema: Mapping[str, str], encoder: Any) -> IndexInfo:
    """The served version: its manifest, prefixes, metadata columns with their condition types
    (service/engine/metadata_filter.py), catalog size, and whether image queries are served
    (`encoder` has an image tower)."""
    manifest = bundle.manifest
    return IndexInfo(
        bundle_version=manifest.version,
        bundle_name=manifest.name,
        created_at=manifest.created_at,
        rows=manifest.rows,
        dim=manifest.dim,
        k=manifest.k,
        encoder=manifest.encoder or "",
        modality=manifest.modality,
        prefixes=[
            PrefixInfo(
                granularity=Granularity(p.granularity),
                prefix_length=p.length,
                factory=p.factory,
                kind=p.kind,
                on_disk=p.ondisk,
                search_parameters=p.search,
                **tuned_figures(p),
            )
            for p in manifest.prefixes
        ],
        metadata_fields=list(metadata_schema),
        concepts=len(bundle.coder.catalog),
        image_queries=bool(encoder is not None and encoder.has_image_tower),
        metadata_schema=dict(metadata_schema),
    )


def page_offset(token: str, total: int) -> int:
    """The offset a page token holds; QueryError unless it is a number within `total`."""
    if not token:
        return 0
    if not token.isdigit() or int(token) > total:
        raise QueryError(f"invalid page token {echo(token)}")
    return int(token)


def tuned_figures(entry: PrefixEntry) -> dict[str, float | None]:
    """PrefixInfo's tuned_recall / tuned_latency_ms / recall_target of a manifest entry: 1 for an
    exact index, the tuning's figures for a tuned one, None where not tuned."""
    if entry.factory == "Flat":
        return {"tuned_recall": 1.0, "tuned_latency_ms": None, "recall_target": None}
    tuning = entry.tuning
    if tuning is None or tuning.status == "untuned":
        return {"tuned_recall": None, "tuned_latency_ms": None, "recall_target": None}
    return {
        "tuned_recall": tuning.recall,
        "tuned_latency_ms": tuning.latency_ms,
        "recall_target": tuning.target,
    }
