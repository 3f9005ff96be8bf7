"""Concept filters, applied inside the search so that a filtered search still returns k hits
whenever k rows qualify.

The allowed rows come from the bundle's postings (concept → rows where it is among the k
active concepts): a row qualifies when, for every required reference, one of its concepts is
active (a name stands for every concept so named), and no concept of any excluded reference
is. A filter's scope (local, global; CDS, `training.cds`) narrows every reference to its
concepts of that scope, so "require dog, local" trusts only the dog concepts that look at the
dog's own patches, not those that fire on dog-park scenes.

A name the catalog lacks that is a word or phrase of up to three words is, where the engine
has an encoder and the bundle a vocabulary readout, a zero-shot concept made on its first use
(service/engine/open_vocabulary.py): its kept rows stand in for postings, required or excluded
alike. `filter_concepts` says how each reference was made and warns of those below the
catalog's precision floor.

Planned by cardinality, as a vector database plans a filter. An allowed set (`AllowedRows`,
indexer/format/row_bitmaps.py) is kept as sorted row ids when few (under 1/32 of the rows),
else as a bitmap (N/8 bytes); a dense concept's bitmap is built from its postings on first use
and kept with the bundle (`Bundle.concept_bitmaps`), a sparse concept is its postings. The
references are resolved to concepts first (a concept named by several references counts once);
the required ones are intersected from the one with the fewest rows (listed ∩ anything: a
lookup per listed row; bitmap ∩ bitmap: a bytewise and), the excluded ones are one union,
removed from the result or — without required references — complemented (a bitmap not: every
row but those). So a frequent word's filter costs a few bytewise operations on N/8 bytes, and a
rare word's its postings: no filter sorts, merges or materialises the rows it allows, and the
number of references is capped by service/limits.py. A bitmap goes to FAISS as it is
(`IDSelectorBitmap`), listed rows as a hash set.

The search then scores only allowed rows:

- a concept filter allowing many rows but at most a quarter of them, at a prefix whose index
  stores its vectors exactly, is scanned from its block: its allowed rows' vectors copied
  together on its first search and kept (service/engine/filter_blocks.py), so a frequent
  word's scan reads contiguous memory instead of scattered rows;
- few allowed rows (≤ `exact_max` at 256 dimensions and above, proportionally more at a shorter
  prefix: `exact_budget`) and an index that stores its vectors exactly (Flat, HNSW's storage, a
  refine's Flat): read just those rows and score them exactly;
- otherwise each index kind searches inside the allowed rows its own way (`ServedIndex.search`
  with `allowed`, indexer/format/served/): the shared store scans them, codes reranked from it
  search their codes inside them, and FAISS itself skips the other rows through an ID selector
  passed in the search parameters of the index's own type (MappedIndex.faiss_params: the
  index's efSearch, nprobe, k_factor or the request's operating point; a refine passes the
  selector to its base index), so approximate indexes filter during their traversal rather
  than after it;
- a filter allowing at least a quarter of the rows, on an HNSW index, is answered after the
  search: the unfiltered search fetches twice the hits the filter's share predicts among the
  top k (`post_filtered`), and its allowed hits are kept in order; should fewer than k of them
  be allowed (the allowed rows lie away from the query), the filtered traversal below answers;
- an HNSW traversal with a selector visits the rows an unfiltered one visits and keeps the
  allowed ones, so its efSearch is divided by the filter's share (`filtered_ef`): it then meets
  as many allowed rows as the unfiltered search meets rows, and keeps its recall; a share near
  1 costs about what the unfiltered search costs. Where that traversal would read more rows
  than the allowed set holds (about EXACT_ROWS_PER_EF rows per unit of efSearch), the allowed
  rows are scored exactly instead;
- an IVF search with a selector probes the lists an unfiltered one probes and scores their
  allowed entries, so its nprobe is divided by the filter's share likewise (`filtered_nprobe`,
  at most every list);
- should an approximate index still return fewer than min(k, allowed) hits, the allowed rows
  are scored exactly instead, where the index stores them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import partial

import faiss
import numpy as np

from indexer.format.bundle import Bundle
from indexer.format.row_bitmaps import AllowedRows, bits_of_rows

# each kind's search inside allowed rows, and its rules, moved to indexer/format/served/
# (allowed.py, mapped.py; store_rerank.py): importable from here too
from indexer.format.served.allowed import POST_FILTER_FETCH as POST_FILTER_FETCH
from indexer.format.served.allowed import exact_top, pad
from indexer.format.served.allowed import filtered_ef as filtered_ef
from indexer.format.served.allowed import filtered_nprobe as filtered_nprobe
from indexer.format.served.mapped import post_filtered as post_filtered
from indexer.format.served.params import SearchParams
from indexer.format.served_index import ServedIndex, served
from service.engine.filter_blocks import FilterBlocks
from service.engine.open_vocabulary import OpenVocabulary, phrase_of
from service.errors import QueryError, bounded
from service.results import ConceptRef, FilterConcept, Scope
from training.cedar.sparse_codes import parse_concept_label
from training.core.errors import InputError

EXACT_MAX = 4096
EXACT_WIDTH = 256  # exact_max counts rows of this width; a shorter prefix scores more rows


def resolve_ref(
    bundle: Bundle, ref: ConceptRef, role: str = "filter", scope: Scope = Scope.ANY
) -> list[int]:
    """The concept ids a reference stands for, only those of `scope` unless it is "any";
    QueryError naming the reference when the catalog lacks it or has none of that scope."""
    coder = bundle.coder
    try:
        if ref.id is not None:
            concepts = coder.resolve(int(ref.id))
        elif ref.label is not None:
            concepts = [parse_concept_label(ref.label, bundle.dim)]
        elif ref.name is not None and ref.name.strip():
            concepts = coder.resolve(ref.name)
        else:
            raise QueryError(f"an empty concept reference in {role}")
    except (InputError, ValueError) as exc:
        raise QueryError(f"unknown concept {ref} in {role}: {bounded(str(exc), 400)}") from None
    if scope == Scope.ANY:
        return concepts
    if all(entry.scope is None for entry in coder.catalog):
        raise QueryError(
            f"a {scope} filter needs concept scopes, and this bundle's catalog has none "
            "(score them with `strata eval cds --artifact`, then rebuild the bundle)"
        )
    kept = [c for c in concepts if coder.catalog[c].scope == scope]
    if not kept:
        found = ", ".join(f"{coder.catalog[c].label} {coder.catalog[c].scope}" for c in concepts)
        raise QueryError(f"concept {ref} in {role} has no {scope} concept ({found})")
    return kept


def concept_rows(bundle: Bundle, concepts: Collection[int]) -> AllowedRows:
    """The rows where any of the concepts is active: a dense concept's kept bitmap (indexer/
    row_bitmaps.py), a sparse one's postings; several concepts, one union of them all (sparse
    rows merged when they stay few, else every concept marked into one bitmap)."""
    bitmaps = bundle.concept_bitmaps
    parts = [bitmaps.get(c) for c in sorted(set(concepts))]
    if not parts:
        return AllowedRows(bundle.rows, np.zeros(0, dtype=np.int64))
    if len(parts) == 1:
        rows, bits = parts[0]
        return AllowedRows(bundle.rows, rows, bits)
    listed = [rows for rows, _ in parts if rows is not None]
    dense = [bits for _, bits in parts if bits is not None]
    if not dense and not bitmaps.dense(sum(len(rows) for rows in listed)):
        return AllowedRows(bundle.rows, np.unique(np.concatenate(listed)))
    union = np.bitwise_or.reduce(dense) if dense else bits_of_rows(bundle.rows, listed.pop())
    if listed:
        union = union | bits_of_rows(bundle.rows, np.unique(np.concatenate(listed)))
    return AllowedRows.of_bits(bundle.rows, union)


def open_phrase(
    bundle: Bundle, ref: ConceptRef, scope: str, vocabulary: OpenVocabulary | None
) -> str | None:
    """The phrase a reference stands for when the open vocabulary makes it a zero-shot concept
    (service/engine/open_vocabulary.py): a name of one to three words that names no concept,
    or only zero-shot word concepts of the readout (whose training corpus's cosine cut τ does
    not carry to another gallery: the open vocabulary's cut is taught on this one), in a
    filter of any scope; None otherwise (the catalog resolves it, or refuses it)."""
    if vocabulary is None or ref.name is None or scope != Scope.ANY:
        return None
    phrase = phrase_of(ref.name)
    if phrase is None:
        return None
    coder = bundle.coder
    named = {*coder.named(phrase), *coder.named(ref.name)}
    if any(not coder.catalog[c].zero_shot for c in named):
        return None
    return phrase


def allowed_rows(
    bundle: Bundle,
    require: Sequence[ConceptRef],
    exclude: Sequence[ConceptRef],
    scope: Scope = Scope.ANY,
    kept: FilterBlocks | None = None,
    vocabulary: OpenVocabulary | None = None,
) -> AllowedRows:
    """The rows a filter allows (see the module docstring), keyed by the concepts it
    requires and excludes; with a `scope` other than "any", each reference stands for its
    concepts of that scope only; `kept`: where a filter's rows are kept for its next use;
    `vocabulary`: where a name the catalog lacks becomes a zero-shot concept (None: refused)."""
    opened = {r: open_phrase(bundle, r, scope, vocabulary) for r in (*require, *exclude)}
    required = frozenset(
        frozenset(resolve_ref(bundle, r, "require", scope)) for r in require if not opened[r]
    )
    excluded = frozenset(
        c for r in exclude if not opened[r] for c in resolve_ref(bundle, r, "exclude", scope)
    )
    open_required = frozenset(p for r in require if (p := opened[r]))
    open_excluded = frozenset(p for r in exclude if (p := opened[r]))
    key: tuple = (required, excluded)
    if open_required or open_excluded:
        key += (open_required, open_excluded)

    def rows() -> AllowedRows:
        assert vocabulary is not None or not (open_required or open_excluded)
        made = vocabulary.concept if vocabulary is not None else None
        return concept_filter_rows(
            bundle,
            required,
            excluded,
            [made(p).rows for p in sorted(open_required)] if made else [],
            [made(p).rows for p in sorted(open_excluded)] if made else [],
        ).keyed(key)

    return rows() if kept is None else kept.allowed(key, rows)


def concept_filter_rows(
    bundle: Bundle,
    required: Collection[frozenset[int]],
    excluded: Collection[int],
    open_required: Sequence[AllowedRows] = (),
    open_excluded: Sequence[AllowedRows] = (),
) -> AllowedRows:
    """The rows where, for every required set, one of its concepts is active, and no
    excluded concept is (the module docstring's plan); `open_required` / `open_excluded`: the
    rows of zero-shot phrases, required or excluded alike."""
    sets = sorted(
        [*(concept_rows(bundle, ref) for ref in required), *open_required], key=lambda s: s.count
    )
    allowed = sets[0] if sets else AllowedRows.everything(bundle.rows)
    for rows in sets[1:]:
        if allowed.count == 0:
            break
        allowed = allowed & rows
    if excluded and allowed.count:
        banned = concept_rows(bundle, excluded)
        allowed = allowed - banned if sets else ~banned
    for rows in open_excluded:
        allowed = allowed - rows
    return allowed


def filter_concepts(
    bundle: Bundle,
    require: Sequence[ConceptRef],
    exclude: Sequence[ConceptRef],
    scope: Scope = Scope.ANY,
    vocabulary: OpenVocabulary | None = None,
) -> tuple[list[FilterConcept], list[str]]:
    """How each reference of a filter was made — a learnt word concept, a zero-shot one (a
    word of the readout without labels, or a phrase the open vocabulary made), or CEDAR axes —
    and a warning for each one none of whose concepts holds (held-out precision below the
    catalog's floor, or not measured, or on this gallery its agreement too low or fallen from
    its training corpus's: training.cedar.concepts): the filter runs, but what it allows may
    not be what its name says. References resolve as the filter resolves them."""
    coder = bundle.coder
    made, warnings = [], []
    for role, refs in (("require", require), ("exclude", exclude)):
        for ref in refs:
            if phrase := open_phrase(bundle, ref, scope, vocabulary):
                assert vocabulary is not None
                made.append(FilterConcept(str(ref), role, "zero-shot"))
                warnings.append(
                    vocabulary.concept(phrase).typo
                    or below_floor_warning(coder.floor, ref, role, "a zero-shot phrase")
                )
                continue
            concepts = resolve_ref(bundle, ref, role, scope)
            words = [c for c in concepts if c >= coder.axis_concepts]
            kind = "axis" if not words else "learnt"
            if words and all(coder.catalog[c].zero_shot for c in words):
                kind = "zero-shot"
            made.append(FilterConcept(str(ref), role, kind))
            if not any(coder.holds(c) for c in concepts):
                entry = coder.catalog[concepts[0]]
                if reason := coder.gallery_reason(concepts[0]):
                    warnings.append(
                        f"concept {ref} in {role} is not shown on this gallery ({reason}): "
                        "the rows it allows may not show it"
                    )
                    continue
                measured = (
                    "a zero-shot word, no held-out precision"
                    if entry.zero_shot
                    else "no held-out precision measured"
                    if entry.precision is None
                    else f"held-out precision {entry.precision:.3f}"
                )
                warnings.append(below_floor_warning(coder.floor, ref, role, measured))
    return made, [w for w in warnings if w is not None]


def below_floor_warning(
    floor: float | None, ref: ConceptRef, role: str, measured: str
) -> str | None:
    """The warning of a filter reference below the precision floor (None: no floor)."""
    if floor is None:
        return None
    return (
        f"concept {ref} in {role} is below the precision floor {floor:.2f} ({measured}): "
        "the rows it allows may not show it"
    )


def exact_budget(exact_max: int, length: int) -> int:
    """The allowed rows scored exactly rather than through the index's own search: `exact_max`
    at EXACT_WIDTH dimensions and above, proportionally more at a shorter prefix (the cost is
    rows × length), so a short shortlist prefix scores a large filtered set exactly."""
    return exact_max * max(1, EXACT_WIDTH // max(1, int(length)))


def filtered_search(
    index: ServedIndex | faiss.Index,
    query: np.ndarray,
    k: int,
    allowed: AllowedRows,
    exact_max: int = EXACT_MAX,
    setting: str = "",
    blocks: FilterBlocks | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(scores [1, k], rows [1, k]; −1 past the last hit) of one prefix query [1, L] over the
    allowed rows only (strategy in the module docstring); `setting`: search parameters (a
    ParameterSpace string) other than the index's own; `blocks`: where a concept filter's
    allowed rows are kept together (service/engine/filter_blocks.py), if anywhere."""
    query = np.ascontiguousarray(np.atleast_2d(query), dtype=np.float32)
    k = int(k)
    if allowed.count == 0:
        return pad(np.zeros((1, 0), np.float32), np.zeros((1, 0), np.int64), k)
    index = served(index)
    storage = index.exact
    length = query.shape[1]
    if (
        storage is not None
        and blocks is not None
        and allowed.key is not None
        and blocks.fits(allowed.count, length, allowed.total)
    ):
        block = blocks.get((allowed.key, length), allowed.materialise, storage.rows)
        return pad(*block.search(query, k, partial(storage.products, query=query[0])), k)
    if storage is not None and allowed.count <= exact_budget(exact_max, length):
        return pad(*exact_top(storage, query, allowed.materialise(), k), k)
    # each kind's own search inside the allowed rows (indexer/format/served/allowed.py)
    return index.search(query, k, SearchParams.parse(setting), allowed)
