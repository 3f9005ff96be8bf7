"""Descriptions of sparse codes over a bundle: a phrase and the nearest gallery captions.

A code (a query's active word concepts and k CEDAR axes, or a row's as its postings hold them)
is described by what a reader is shown of it, and nothing else (training/cedar/descriptions.py):

- its phrase: composed from the concepts the code shows (`ConceptCoder.shown`, on the bundle's
  gallery: held to their agreement there), strongest first, those whose held-out precision
  reaches DESCRIBED only, and on a gallery whose agreement fell less than a shown concept's
  may (`ConceptCoder.sayable`) — a description is every one of its words at once, so it takes
  the surest — and, where the version keeps its gallery's text directions, whose name holds of the
  code's own vector there (its readout word wins its neighbourhood on it:
  indexer/vocabulary/query_gate.py's `judge`); no such concept, no phrase (rather than a wrong
  one);
- its nearest captions: examples of the phrase — the gallery rows nearest to the code's
  reconstruction x̂ = Uᵀ z̃ + b (its k axes), searched in the bundle's full-length prefix index
  (s_D, the cosine of the rotated vectors, x̂ first normalised as every query is; on the
  Milvus backend, the engine's full-length field), CAPTION_POOL times as many as asked, kept
  where the row's caption uses every content word of the phrase, the rows to exclude dropped —
  the row itself when a row is described — and their text read from the metadata's caption
  column. No phrase, no captions.

A bundle whose metadata has no caption column (`caption`, else `text`) gets phrases only: no
search is run. Asking for no captions runs no search either.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np

from indexer.format.bundle import Bundle
from service.results import Description, NearCaption
from training.cedar.concepts import ConceptCoder
from training.cedar.descriptions import code_reconstruction, compose_phrase, content_words
from training.core.granularity import Granularity
from training.core.metrics import unit_rows

CAPTION_COLUMNS = ("caption", "text")
# the held-out precision a shown concept needs to be said in a phrase: the lowest whose phrases'
# every word held on 80 % of the Flickr8k val rows described (benchmarks/training/gallery_trust.py)
DESCRIBED = 0.6
CAPTION_POOL = 8  # rows searched per caption asked, before those that say the phrase are kept

# (prefix length, rotated queries [Q, ≥ L], k) → (scores [Q, k], rows [Q, k], −1 past the last)
PrefixSearch = Callable[[int, np.ndarray, int], tuple[np.ndarray, np.ndarray]]


def caption_column(columns: Collection[str]) -> str | None:
    """The metadata column a bundle's captions are in, None when it has none."""
    return next((c for c in CAPTION_COLUMNS if c in columns), None)


# whether a name holds of the vector a code was read from (QueryGate.judge of that vector)
Said = Callable[[str], bool]


def code_names(
    coder: ConceptCoder, concepts: np.ndarray, activations: np.ndarray, said: Said | None = None
) -> list[str]:
    """The names a phrase of a code may say (module doc): of what the code shows
    (`ConceptCoder.shown`: word concepts first, then axes, one per name), those a concept of
    the code shown under that name, sayable on the gallery (`ConceptCoder.sayable`), holds to a
    held-out precision of DESCRIBED (a zero-shot word merged with a precise axis of its name
    keeps the axis's precision) and, with `said`, that hold of the code's vector on the
    gallery's own text directions, in that order; padding (−1) left out."""
    ids = np.asarray(concepts)
    precise = {
        coder.catalog[c].name.lower()
        for c in map(int, ids)
        if c >= 0 and coder.sayable(c) and (coder.catalog[c].precision or 0.0) >= DESCRIBED
    }
    names = []
    for concept, _ in coder.shown(ids, np.asarray(activations)):
        name = coder.catalog[concept].name
        if name.lower() in precise and (said is None or said(name)):
            names.append(name)
    return names


def code_phrase(
    coder: ConceptCoder, concepts: np.ndarray, activations: np.ndarray, said: Said | None = None
) -> str:
    return compose_phrase(code_names(coder, concepts, activations, said))


def saying(phrase: str, caption: str) -> bool:
    """Whether a caption uses every content word of a phrase (an example of it)."""
    return content_words(phrase) <= content_words(caption)


def nearest_captions(
    bundle: Bundle,
    coder: ConceptCoder,
    concepts: np.ndarray,
    activations: np.ndarray,
    count: int,
    exclude: Sequence[Collection[int]],
    search: PrefixSearch | None = None,
    phrases: Sequence[str] | None = None,
) -> list[list[NearCaption]]:
    """Per code [N, k] (its axes: ids below 2D): the `count` gallery rows nearest to its
    reconstruction, best first, none of its `exclude` rows, and with `phrases` only those whose
    caption says the code's phrase (`saying`; none for an empty phrase) among the
    CAPTION_POOL × `count` nearest; [] each when `count` is 0 or the bundle has no caption
    column. `search`: where the rows are found (default: the bundle's own index,
    `search_prefix`)."""
    column = caption_column(bundle.metadata(np.zeros(0, dtype=np.int64)).column_names)
    if count <= 0 or column is None or len(concepts) == 0:
        return [[] for _ in range(len(concepts))]
    wanted = [True] * len(concepts) if phrases is None else [bool(p) for p in phrases]
    if not any(wanted):
        return [[] for _ in range(len(concepts))]
    artifact = coder.artifact
    x_hat = unit_rows(code_reconstruction(artifact.rotation, artifact.mean, concepts, activations))
    full = bundle.prefix_length(Granularity.FULL)
    pool = count if phrases is None else CAPTION_POOL * count
    k = min(bundle.rows, pool + max(len(e) for e in exclude))
    scores, rows = (search or bundle.search_prefix)(full, bundle.rotate(x_hat), k)
    found = [
        [(int(r), float(s)) for s, r in zip(score, row, strict=True) if r >= 0 and r not in skip]
        if keep
        else []
        for score, row, skip, keep in zip(scores, rows, exclude, wanted, strict=True)
    ]
    flat = [r for pairs in found for r, _ in pairs]
    table = bundle.metadata(flat)
    ids, texts = table.column("id").to_pylist(), table.column(column).to_pylist()
    out, at = [], 0
    for i, pairs in enumerate(found):
        near = [
            NearCaption(str(ids[at + j]), r, str(texts[at + j] or ""), s)
            for j, (r, s) in enumerate(pairs)
        ]
        if phrases is not None:
            near = [c for c in near if saying(phrases[i], c.text)]
        out.append(near[:count])
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
    said: Sequence[Said | None] | None = None,
) -> list[Description]:
    """The description of each code [N, width] (word concepts and axes, padded with −1): its
    phrase and its nearest captions (module docstring); `exclude[i]` the rows code i's captions
    may not be (default: none); `search` as `nearest_captions` takes it; `said[i]` whether a
    name holds of code i's vector (default: every name the precision admits)."""
    concepts = np.atleast_2d(concepts)
    activations = np.atleast_2d(activations)
    exclude = exclude if exclude is not None else [()] * len(concepts)
    holds = said if said is not None else [None] * len(concepts)
    phrases = [
        code_phrase(coder, c, a, s) for c, a, s in zip(concepts, activations, holds, strict=True)
    ]
    axes = concepts < coder.axis_concepts
    near = nearest_captions(
        bundle,
        coder,
        np.where(axes, concepts, -1),
        np.where(axes, activations, 0.0),
        captions,
        exclude,
        search,
        phrases,
    )
    return [Description(p, n) for p, n in zip(phrases, near, strict=True)]


def describe_pair(
    bundle: Bundle,
    coder: ConceptCoder,
    codes: tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    row: int,
    captions: int,
    search: PrefixSearch,
    said: Sequence[Said | None],
) -> list[Description]:
    """Explain's descriptions of a query's and an item's code (`codes`, each its ids and
    activations), the item's `row` excluded from its captions, captions found by `search`;
    `said[i]` whether a name holds of code i's vector (None: every name the precision admits)."""
    ids, values = stack_codes(list(codes))
    return describe_codes(bundle, coder, ids, values, captions, [(), (row,)], search, said)
