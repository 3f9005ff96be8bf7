"""Why a hit matched: CEDAR concepts shared by query and item, and the cosine at every prefix.

Concepts. CEDAR codes a vector x as z̃ = U(x − b) and keeps its k largest |coordinates|; a
signed concept is an axis with a sign (id 2j: +j, 2j + 1: −j) and its activation is |z̃_j|.
A query's concepts are coded on the spot (`ConceptCoder.encode`); an item's are read from the
bundle's postings — the same codes the concept filter uses, so a hit that passed
"require dog" lists that concept among its own.

Word concepts. With a vocabulary readout (training.cedar.readout), a vector's active word
concepts (margin ≥ 0: the query's computed on the spot, an item's read from the word
postings, the very entries "require w" reads) come first in every list, by decreasing margin,
then its k axis concepts; a shared word concept's contribution is the product of the two
margins.

What is shown. Every list here (a hit's concepts, the shared ones, the query's and the
item's) holds only the concepts that hold: named, with a held-out precision at or above the
artifact's floor (`ConceptCoder.holds`, the floor picked on dev by training/cedar/floor.py).
One name appears once: a word concept and the axes of its name are merged into one entry,
their activations (contributions) summed, under the word concept's id
(`ConceptCoder.shown`); and an axis named like a learnt word is shown only where that word
concept is active too (on an item, in its gated postings), so Explain never names what
"require" on that name would refuse. A filter may still name a concept below the floor; the
search then warns (service/engine/filtering.py's `filter_concepts`).

Contribution. For a concept c active in both query q and item x (same axis, same sign),

    contribution(c) = a_q(c) · a_x(c) = z̃_q,j · z̃_x,j  > 0,

the concept's term in ⟨U(q − b), U(x − b)⟩ = ⟨q − b, x − b⟩ (U is orthogonal): how much of
the two centred embeddings' agreement that concept carries. Shared concepts are listed by
decreasing contribution.

Prefix similarities. s_L(q, x) = ⟨p_L(q), p_L(x)⟩ at every prefix length L of the contract, p_L the
renormalised first L rotated coordinates (docs/reference/metrics.md#prefix-similarity). The item's
p_L is read back from the prefix index when it stores vectors exactly (Flat, HNSW, a refine), or
derived from a longer prefix that does (p_L = normalise(p_M[:L]) for M ≥ L); a prefix with neither
is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from indexer.format.bundle import Bundle
from indexer.format.served_index import exact_storage
from indexer.vocabulary.query_gate import QueryGate
from service.results import ConceptActivation, PrefixSimilarity, SharedConcept
from training.cedar.concepts import ConceptCoder
from training.core.granularity import Granularity
from training.core.metrics import prefix_vectors

if TYPE_CHECKING:
    from service.engine.scoring import PreparedQuery


def row_concepts(bundle: Bundle, rows: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(concept ids [n, k] int64, activations [n, k] float32) of bundle rows, strongest first
    (ties in concept order), read from the postings of the 2D axis concepts
    (`Bundle.entries_of_rows`: a few rows by binary searches, many by one pass)."""
    rows = np.asarray(rows, dtype=np.int64)
    k = bundle.manifest.k
    ids = np.full((len(rows), k), -1, dtype=np.int64)
    values = np.zeros((len(rows), k), dtype=np.float32)
    if len(rows) == 0:
        return ids, values
    found_rows, concepts, activations = bundle.entries_of_rows(0, rows, 2 * bundle.dim)
    unique = np.unique(rows)
    owner = np.searchsorted(unique, found_rows)  # entries in concept order: rank within row
    order = np.argsort(owner, kind="stable")
    owner, concepts, activations = owner[order], concepts[order], activations[order]
    starts = np.searchsorted(owner, np.arange(len(unique)))
    slot = np.arange(len(owner)) - starts[owner]
    keep = slot < k
    by_row_ids = np.full((len(unique), k), -1, dtype=np.int64)
    by_row_values = np.zeros((len(unique), k), dtype=np.float32)
    by_row_ids[owner[keep], slot[keep]] = concepts[keep]
    by_row_values[owner[keep], slot[keep]] = activations[keep]
    at = np.searchsorted(unique, rows)
    ids, values = by_row_ids[at], by_row_values[at]
    order = np.argsort(-values, axis=1, kind="stable")
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(values, order, axis=1)


def row_words(bundle: Bundle, rows: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per bundle row: (word concept ids, margins) active on it, largest margin first, read
    from the postings of the word concepts (ids 2D and up; none without a vocabulary readout)
    in one pass over their entries."""
    rows = np.asarray(rows, dtype=np.int64)
    found_rows, concepts, margins = bundle.entries_of_rows(bundle.coder.axis_concepts, rows)
    out = []
    for row in rows:
        mine = np.flatnonzero(found_rows == row)
        order = np.argsort(-margins[mine].astype(np.float64), kind="stable")
        out.append((concepts[mine][order], margins[mine][order].astype(np.float32)))
    return out


def with_words(
    words: tuple[np.ndarray, np.ndarray], axes: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """One code of a vector: its active word concepts, then its k axis concepts."""
    return np.concatenate([words[0], axes[0]]), np.concatenate([words[1], axes[1]])


def stored_embedding(bundle: Bundle, stored: np.ndarray) -> np.ndarray:
    """The unit embedding x [D] a row's full-length stored vector p_D (its rotated, centred
    direction z/|z|) was made from: x = s·p_D R + m, s > 0 the scale that makes |x| = 1 (every
    cache row is a unit embedding), with the bundle's GraSP rotation R and mean m."""
    u = np.asarray(stored, dtype=np.float64) @ bundle.grasp.rotation.astype(np.float64)
    u /= max(float(np.linalg.norm(u)), 1e-12)
    m = bundle.grasp.mean.astype(np.float64)
    um = float(u @ m)
    s = -um + np.sqrt(max(um * um - float(m @ m) + 1.0, 0.0))
    return (s * u + m).astype(np.float32)


# the version's gate on a query's zero-shot words, read once per loaded version
version_gate = lru_cache(maxsize=8)(QueryGate.of)


def query_words(bundle: Bundle, embedded: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per query (embeddings [n, D]): its active word concepts as its version reads them, the
    coder's less the zero-shot words the version's gate refuses (indexer/vocabulary/
    query_gate.py), as the version's rows were gated."""
    words = bundle.coder.active_words(embedded)
    gate = version_gate(bundle)
    return words if gate is None else gate.kept(embedded, words)


def explained_codes(
    bundle: Bundle, live: Sequence[PreparedQuery]
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The code (`with_words`: `query_words`, then axes) of each query in `live` that asks for
    an explanation, by its place in `live`: all of them coded at once."""
    explained = [i for i, p in enumerate(live) if p.query.explain]
    if not explained:
        return {}
    embedded = np.stack([live[i].embedding for i in explained])
    ids, values = bundle.coder.encode(embedded)
    words = query_words(bundle, embedded)
    return {i: with_words(words[j], (ids[j], values[j])) for j, i in enumerate(explained)}


def activations_of(
    coder: ConceptCoder, ids: np.ndarray, values: np.ndarray, limit: int | None = None
) -> list[ConceptActivation]:
    """The concepts of one coded vector a reader is shown (`ConceptCoder.shown`: those that
    hold, one per name, word concepts first), strongest first (ids −1 skipped)."""
    out = []
    for concept, value in coder.shown(ids, values, limit):
        entry = coder.catalog[concept]
        out.append(
            ConceptActivation(concept, entry.label, entry.name, value, entry.scope, entry.zero_shot)
        )
    return out


def shared_concepts(
    coder: ConceptCoder,
    query_ids: np.ndarray,
    query_values: np.ndarray,
    item_ids: np.ndarray,
    item_values: np.ndarray,
) -> list[SharedConcept]:
    """Concepts active in both that a reader is shown, with contribution = query activation ×
    item activation; the concepts of one name merged (their contributions summed, the
    activations those of the first: `ConceptCoder.shown`)."""
    item = {int(c): float(v) for c, v in zip(item_ids, item_values, strict=True) if c >= 0}
    query = {int(c): float(v) for c, v in zip(query_ids, query_values, strict=True) if c >= 0}
    both = [c for c in query if c in item]
    contributions = np.array([query[c] * item[c] for c in both], dtype=np.float64)
    shared = []
    for concept, contribution in coder.shown(np.array(both, dtype=np.int64), contributions):
        entry = coder.catalog[concept]
        q, x = query[concept], item[concept]
        shared.append(
            SharedConcept(
                concept, entry.label, entry.name, q, x, contribution, entry.scope, entry.zero_shot
            )
        )
    return shared


def item_prefixes(bundle: Bundle, row: int) -> dict[int, np.ndarray]:
    """The item's stored p_L for every prefix length it can be read back at (see above)."""
    stored: dict[int, np.ndarray] = {}
    for length in bundle.prefix_lengths:
        storage = exact_storage(bundle.index(length))
        if storage is not None:
            stored[length] = storage.reconstruct(int(row)).astype(np.float32)
    out: dict[int, np.ndarray] = {}
    for length in bundle.prefix_lengths:
        source = min((m for m in stored if m >= length), default=None)
        if source is not None:
            out[length] = prefix_vectors(stored[source][None, :], length)[0]
    return out


def prefix_similarities(
    contract: dict[str, int], rotated_query: np.ndarray, items: dict[int, np.ndarray]
) -> list[PrefixSimilarity]:
    """s_L(query, item) at every prefix length of the contract the item's p_L is known at
    (`items`: length -> p_L, as `item_prefixes` reads them), shortest first."""
    query = np.atleast_2d(np.asarray(rotated_query, dtype=np.float32))
    out = []
    for granularity, length in sorted(contract.items(), key=lambda g: g[1]):
        if length in items:
            cosine = float(prefix_vectors(query, length)[0] @ items[length])
            out.append(PrefixSimilarity(Granularity(granularity), length, cosine))
    return out
