"""Concept filters, applied inside the search so that a filtered search still returns k hits
whenever k rows qualify.

The allowed rows come from the bundle's postings (concept → rows where it is among the k
active concepts): a row qualifies when, for every required reference, one of its concepts is
active (a name stands for every concept so named), and no concept of any excluded reference
is. A filter's scope (local, global; CDS, `training.cds`) narrows every reference to its
concepts of that scope, so "require dog, local" trusts only the dog concepts that look at the
dog's own patches, not those that fire on dog-park scenes. Without required references the
allowed set is kept as its complement (every row but the excluded ones), so a gallery-wide
exclusion never materialises N row ids.

Cost: the references are resolved to a set of concepts first (a concept named by several
references counts once); the excluded concepts' postings are marked in one row mask (a bitmap
union: each posting entry touched once, so at most N·k entries however many references), and
the required references are intersected starting from the one with the fewest rows. So a
filter's work is bounded by the postings of the distinct concepts it names — at most the whole
postings, N·k entries — and never grows with repeated or overlapping references; the number of
references is capped by service/limits.py. A complement is handed to FAISS as a bitmap
selector (`IDSelectorBitmap`, N/8 bytes), not a hash set of the excluded rows.

The search then scores only allowed rows:

- few allowed rows (≤ `exact_max` at 256 dimensions and above, proportionally more at a shorter
  prefix: `exact_budget`) and an index that stores its vectors exactly (Flat, HNSW's storage, a
  refine's Flat): read just those rows and score them exactly;
- otherwise FAISS itself skips the other rows, through an ID selector passed in the search
  parameters of the index's own type (indexer.format.prefix_index.search_parameters: the index's
  efSearch, nprobe, k_factor or the request's operating point; a refine passes the selector
  to its base index), so approximate
  indexes filter during their traversal rather than after it;
- an HNSW search meets allowed rows at the filter's share of the rows it visits, so its
  efSearch is raised until about 2·k allowed rows are met (`filtered_ef`); where that would pass
  FILTERED_EF_MAX the allowed rows are scored exactly at once, instead of after a traversal
  that returns too few;
- should an approximate index still return fewer than min(k, allowed) hits, the allowed rows
  are scored exactly instead, where the index stores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import faiss
import numpy as np

from indexer.format.bundle import Bundle
from indexer.format.prefix_index import exact_storage, search_parameters
from indexer.format.store import StoreIndex
from service.errors import QueryError, bounded
from service.results import ConceptRef
from training.cedar.sparse_codes import parse_concept_label
from training.core.errors import InputError

EXACT_MAX = 4096
EXACT_WIDTH = 256  # exact_max counts rows of this width; a shorter prefix scores more rows
EXACT_FALLBACK_MAX = 200_000
FILTERED_EF_MAX = 1024  # a filtered HNSW search needing more goes to the exact scan
BITMAP_SHARE = 32  # listed rows above 1/32 of the gallery: a bitmap selector, not a hash set


@dataclass(frozen=True)
class AllowedRows:
    """The rows a filter allows out of `total`: the sorted set `rows`, or — when `complement`
    — every row except the sorted set `rows`."""

    total: int
    rows: np.ndarray
    complement: bool = False

    @property
    def count(self) -> int:
        return self.total - len(self.rows) if self.complement else len(self.rows)

    def materialise(self) -> np.ndarray:
        """The allowed rows as a sorted int64 array."""
        if not self.complement:
            return self.rows
        return np.flatnonzero(self.mask()).astype(np.int64, copy=False)  # no sort: one mask

    def within(self, rows: np.ndarray) -> AllowedRows:
        """The rows allowed here and in the sorted set `rows` (a metadata filter's: service/
        metadata_filter.py)."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.complement:
            kept = np.setdiff1d(rows, self.rows, assume_unique=True)
        else:
            kept = np.intersect1d(self.rows, rows, assume_unique=True)
        return AllowedRows(self.total, kept.astype(np.int64, copy=False))

    def contains(self, rows: np.ndarray) -> np.ndarray:
        """A mask: which of `rows` are allowed."""
        inside = np.isin(np.asarray(rows, dtype=np.int64), self.rows)
        return ~inside if self.complement else inside

    def mask(self) -> np.ndarray:
        """Every row's allowed flag, bool [total]."""
        mask = np.full(self.total, self.complement, dtype=bool)
        mask[self.rows] = not self.complement
        return mask

    def selector(self) -> faiss.IDSelector:
        """A FAISS ID selector of the allowed rows (hold a reference while it is used): a hash
        set of the listed rows when they are few (under 1/BITMAP_SHARE of the rows), else — and
        for a complement — a bitmap of every allowed row, whose test is one bit read."""
        if not self.complement and len(self.rows) * BITMAP_SHARE < self.total:
            return faiss.IDSelectorBatch(np.ascontiguousarray(self.rows, dtype=np.int64))
        bits = np.packbits(self.mask(), bitorder="little")
        selector = faiss.IDSelectorBitmap(self.total, faiss.swig_ptr(bits))
        selector.referenced = bits  # IDSelectorBitmap keeps a raw pointer: keep `bits` alive
        return selector


def resolve_ref(
    bundle: Bundle, ref: ConceptRef, role: str = "filter", scope: str = "any"
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
    if scope == "any":
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


def concept_rows(bundle: Bundle, concepts: Sequence[int]) -> np.ndarray:
    """Sorted unique rows where any of the concepts is active."""
    parts = [bundle.postings(c)[0] for c in concepts]
    if not parts:
        return np.zeros(0, dtype=np.int64)
    if len(parts) == 1:
        return np.asarray(parts[0], dtype=np.int64)  # a concept's rows are sorted and unique
    return np.unique(np.concatenate(parts)).astype(np.int64, copy=False)


def union_rows(bundle: Bundle, concepts: set[int]) -> np.ndarray:
    """Sorted rows where any of the concepts is active: one mask over the rows, each posting
    entry marked once (a bitmap union, cost N + the concepts' entries)."""
    if not concepts:
        return np.zeros(0, dtype=np.int64)
    mask = np.zeros(bundle.rows, dtype=bool)
    for concept in sorted(concepts):
        mask[bundle.postings(concept)[0]] = True
    return np.flatnonzero(mask).astype(np.int64, copy=False)


def allowed_rows(
    bundle: Bundle,
    require: Sequence[ConceptRef],
    exclude: Sequence[ConceptRef],
    scope: str = "any",
) -> AllowedRows:
    """The rows a filter allows (see the module docstring); with a `scope` other than "any",
    each reference stands for its concepts of that scope only."""
    required = {frozenset(resolve_ref(bundle, r, "require", scope)) for r in require}
    excluded = {c for r in exclude for c in resolve_ref(bundle, r, "exclude", scope)}
    banned = union_rows(bundle, excluded)
    if not required:
        return AllowedRows(bundle.rows, banned, complement=True)
    sizes = {ref: sum(len(bundle.postings(c)[0]) for c in ref) for ref in required}
    rows = np.zeros(0, dtype=np.int64)
    for i, ref in enumerate(sorted(required, key=lambda r: (sizes[r], sorted(r)))):
        found = concept_rows(bundle, sorted(ref))
        rows = found if i == 0 else np.intersect1d(rows, found, assume_unique=True)
        if len(rows) == 0:
            break
    rows = np.setdiff1d(rows, banned, assume_unique=True)
    return AllowedRows(bundle.rows, rows.astype(np.int64))


def exact_scores(
    index: faiss.Index, query: np.ndarray, rows: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of `rows` by inner product with the stored vectors: ([1, k'], [1, k']) with
    k' = min(k, len(rows)), ties broken by row."""
    storage = exact_storage(index)
    if storage is None:
        raise RuntimeError("the index stores no exact vectors")
    if len(rows) == 0:
        return np.zeros((1, 0), np.float32), np.zeros((1, 0), np.int64)
    vectors = stored_rows(storage, rows)
    # einsum, not a BLAS gemv: a threaded gemv over a few thousand rows costs more in thread
    # hand-offs than the product (16 ms against 0.5 ms at 1,501 × 384 on a busy 2-core machine)
    scores = np.einsum("ij,j->i", vectors, np.asarray(query, dtype=np.float32).reshape(-1))
    if len(rows) > k:  # only the rows scoring at least the k-th best can be among the top k
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = np.flatnonzero(scores >= kth)
        scores, rows = scores[keep], np.asarray(rows)[keep]
    order = np.lexsort((rows, -scores))[:k]
    return scores[order][None, :].astype(np.float32), rows[order][None, :].astype(np.int64)


def stored_rows(storage: faiss.Index | StoreIndex, rows: np.ndarray) -> np.ndarray:
    """float32 [len(rows), d]: the stored vectors of `rows`; read straight off an IndexFlat's
    code array (a numpy gather, no per-row FAISS call), else through `reconstruct_batch`."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    if isinstance(storage, faiss.IndexFlat) and storage.ntotal:
        codes = faiss.rev_swig_ptr(storage.get_xb(), storage.ntotal * storage.d)
        return codes.reshape(storage.ntotal, storage.d)[rows]
    return storage.reconstruct_batch(rows)


def exact_budget(exact_max: int, length: int) -> int:
    """The allowed rows scored exactly rather than through the index's own search: `exact_max`
    at EXACT_WIDTH dimensions and above, proportionally more at a shorter prefix (the cost is
    rows × length), so a short shortlist prefix scores a large filtered set exactly."""
    return exact_max * max(1, EXACT_WIDTH // max(1, int(length)))


def filtered_search(
    index: faiss.Index,
    query: np.ndarray,
    k: int,
    allowed: AllowedRows,
    exact_max: int = EXACT_MAX,
    setting: str = "",
) -> tuple[np.ndarray, np.ndarray]:
    """(scores [1, k], rows [1, k]; −1 past the last hit) of one prefix query [1, L] over the
    allowed rows only (strategy in the module docstring); `setting`: search parameters (a
    ParameterSpace string) other than the index's own."""
    query = np.ascontiguousarray(np.atleast_2d(query), dtype=np.float32)
    k = int(k)
    if allowed.count == 0:
        return _pad(np.zeros((1, 0), np.float32), np.zeros((1, 0), np.int64), k)
    exact = exact_storage(index) is not None
    if exact and allowed.count <= exact_budget(exact_max, query.shape[1]):
        return _pad(*exact_scores(index, query, allowed.materialise(), k), k)
    if isinstance(index, StoreIndex):  # the shared store: one exact scan of the allowed rows
        return index.store.scan(query, index.length, k, allowed.mask())
    wanted = min(k, allowed.count)
    graph = faiss.downcast_index(index)
    if isinstance(graph, faiss.IndexHNSW) and "efSearch" not in setting:
        ef = filtered_ef(graph.hnsw.efSearch, wanted, allowed.count / allowed.total)
        if ef is None and exact and allowed.count <= EXACT_FALLBACK_MAX:
            return _pad(*exact_scores(index, query, allowed.materialise(), k), k)
        setting = ",".join(filter(None, [setting, f"efSearch={ef or FILTERED_EF_MAX}"]))
    selector = allowed.selector()
    params = search_parameters(index, setting, selector)
    scores, rows = index.search(query, k, params=params)
    if exact and int((rows[0] >= 0).sum()) < wanted and allowed.count <= EXACT_FALLBACK_MAX:
        return _pad(*exact_scores(index, query, allowed.materialise(), k), k)
    return scores, rows


def filtered_ef(ef: int, wanted: int, share: float) -> int | None:
    """efSearch for an HNSW search that skips all but `share` of the rows: its own ef, raised
    so that about 2·wanted allowed rows are met on the way (ef·share ≥ 2·wanted); None when that
    needs more than FILTERED_EF_MAX (an exact scan of the allowed rows is then cheaper)."""
    needed = int(np.ceil(2 * wanted / max(share, 1e-12)))
    return max(ef, needed) if needed <= FILTERED_EF_MAX else None


def _pad(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """FAISS's shape: [1, k], rows −1 and scores −inf past the last hit."""
    missing = k - scores.shape[1]
    if missing <= 0:
        return scores, rows
    return (
        np.concatenate([scores, np.full((1, missing), -np.inf, np.float32)], axis=1),
        np.concatenate([rows, np.full((1, missing), -1, np.int64)], axis=1),
    )
