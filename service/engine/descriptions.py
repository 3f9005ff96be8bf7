"""Descriptions of sparse codes over a bundle: a phrase and the nearest gallery captions.

A code (the k active CEDAR concepts of a query, or of a row as its postings hold them) is
described by (training/cedar/descriptions.py)

- its phrase: composed from its strongest named concepts, unnamed axes skipped;
- its nearest captions: the gallery rows nearest to its reconstruction x̂ = Uᵀ z̃ + b, searched
  in the bundle's full-length prefix index (s_D, the cosine of the rotated vectors, x̂ first
  normalised as every query is; on the Milvus backend, the engine's full-length field), the
  rows to exclude dropped — the row itself when a row is
  described — and their text read from the metadata's caption column.

A bundle whose metadata has no caption column (`caption`, else `text`) gets phrases only: no
search is run. Asking for no captions runs no search either.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np

from indexer.format.bundle import Bundle
from service.results import Description, NearCaption
from training.cedar.concepts import ConceptCoder
from training.cedar.descriptions import code_reconstruction, compose_phrase
from training.core.granularity import Granularity
from training.core.metrics import unit_rows

CAPTION_COLUMNS = ("caption", "text")

# (prefix length, rotated queries [Q, ≥ L], k) → (scores [Q, k], rows [Q, k], −1 past the last)
PrefixSearch = Callable[[int, np.ndarray, int], tuple[np.ndarray, np.ndarray]]


def caption_column(columns: Collection[str]) -> str | None:
    """The metadata column a bundle's captions are in, None when it has none."""
    return next((c for c in CAPTION_COLUMNS if c in columns), None)


def code_names(coder: ConceptCoder, concepts: np.ndarray, activations: np.ndarray) -> list[str]:
    """The names of a code's concepts that hold (`ConceptCoder.holds`), strongest first: an
    unnamed axis (its name is its label), a concept below the floor and padding (−1) are left
    out."""
    order = np.argsort(-np.asarray(activations, dtype=np.float64), kind="stable")
    names = []
    for concept in np.asarray(concepts)[order]:
        if concept < 0:
            continue
        entry = coder.catalog[int(concept)]
        if coder.holds(int(concept)) and entry.name and entry.name != entry.label:
            names.append(entry.name)
    return names


def code_phrase(coder: ConceptCoder, concepts: np.ndarray, activations: np.ndarray) -> str:
    return compose_phrase(code_names(coder, concepts, activations))


def nearest_captions(
    bundle: Bundle,
    coder: ConceptCoder,
    concepts: np.ndarray,
    activations: np.ndarray,
    count: int,
    exclude: Sequence[Collection[int]],
    search: PrefixSearch | None = None,
) -> list[list[NearCaption]]:
    """Per code [N, k]: the `count` gallery rows nearest to its reconstruction, best first, none
    of its `exclude` rows; [] each when `count` is 0 or the bundle has no caption column.
    `search`: where the rows are found (default: the bundle's own index, `search_prefix`)."""
    column = caption_column(bundle.metadata(np.zeros(0, dtype=np.int64)).column_names)
    if count <= 0 or column is None or len(concepts) == 0:
        return [[] for _ in range(len(concepts))]
    artifact = coder.artifact
    x_hat = unit_rows(code_reconstruction(artifact.rotation, artifact.mean, concepts, activations))
    full = bundle.prefix_length(Granularity.FULL)
    k = min(bundle.rows, count + max(len(e) for e in exclude))
    scores, rows = (search or bundle.search_prefix)(full, bundle.rotate(x_hat), k)
    kept = [
        [(int(r), float(s)) for s, r in zip(score, row, strict=True) if r >= 0 and r not in skip]
        for score, row, skip in zip(scores, rows, exclude, strict=True)
    ]
    kept = [pairs[:count] for pairs in kept]
    flat = [r for pairs in kept for r, _ in pairs]
    table = bundle.metadata(flat)
    ids, texts = table.column("id").to_pylist(), table.column(column).to_pylist()
    out, at = [], 0
    for pairs in kept:
        out.append(
            [
                NearCaption(str(ids[at + i]), r, str(texts[at + i] or ""), s)
                for i, (r, s) in enumerate(pairs)
            ]
        )
        at += len(pairs)
    return out


def stack_codes(
    codes: Sequence[tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray]:
    """Codes of different k (a query coded at the artifact's k, a row at the bundle's) as one
    [N, max k] pair, padded with id −1 and activation 0."""
    width = max(len(ids) for ids, _ in codes)
    ids = np.full((len(codes), width), -1, dtype=np.int64)
    values = np.zeros((len(codes), width), dtype=np.float32)
    for i, (c, a) in enumerate(codes):
        ids[i, : len(c)], values[i, : len(a)] = c, a
    return ids, values


def describe_codes(
    bundle: Bundle,
    coder: ConceptCoder,
    concepts: np.ndarray,
    activations: np.ndarray,
    captions: int,
    exclude: Sequence[Collection[int]] | None = None,
    search: PrefixSearch | None = None,
) -> list[Description]:
    """The description of each code [N, k]: its phrase and its nearest captions (module
    docstring); `exclude[i]` the rows code i's captions may not be (default: none); `search`
    as `nearest_captions` takes it."""
    concepts = np.atleast_2d(concepts)
    activations = np.atleast_2d(activations)
    exclude = exclude if exclude is not None else [()] * len(concepts)
    near = nearest_captions(bundle, coder, concepts, activations, captions, exclude, search)
    return [
        Description(code_phrase(coder, c, a), n)
        for c, a, n in zip(concepts, activations, near, strict=True)
    ]
