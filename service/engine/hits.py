"""A search's hits from the rows FAISS found: ids, scores and metadata; with explain, each hit's
strongest concepts and the concepts it shares with the query (service/engine/explain.py).

Image paths: a cache embedded from an image corpus stores `image_path` relative to the corpus
root (training/embedding/job.py); a hit returns it resolved against the engine's image root
(`strata serve --image-root`, else the root the cache recorded). An absolute path — what
caches held before — is returned as stored."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import pyarrow as pa

from indexer.format.bundle import Bundle
from service.engine.explain import (
    activations_of,
    row_concepts,
    row_words,
    shared_concepts,
    with_words,
)
from service.results import ConceptActivation, Hit
from training.cedar.concepts import ConceptCoder

IMAGE_PATH = "image_path"


def resolve_image_path(value: str, root: Path | None) -> str:
    """A stored image path as a hit returns it: relative ones joined to `root` (when given),
    absolute ones unchanged."""
    if root is None or PurePosixPath(value).is_absolute() or Path(value).is_absolute():
        return value
    return str(root / value)


class IdColumn:
    """A bundle's id column read by row without an Arrow call per search: its offsets and
    bytes as numpy views (zero-copy), each id decoded on demand (a search reads only its k)."""

    def __init__(self, column: pa.Array | pa.ChunkedArray) -> None:
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
            array = array.cast(pa.string())
        width = np.int64 if pa.types.is_large_string(array.type) else np.int32
        _, offsets, data = array.buffers()
        start = array.offset
        self._offsets = np.frombuffer(offsets, width)[start : start + len(array) + 1].tolist()
        self._data = memoryview(data) if data is not None else memoryview(b"")
        self._array = array  # keeps the buffers alive

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def take(self, rows: list[int]) -> list[str]:
        """The ids of row positions (each in [0, len))."""
        o, data = self._offsets, self._data
        return [str(data[o[r] : o[r + 1]], "utf-8") for r in rows]


def hits_of(
    bundle: Bundle,
    scores: np.ndarray,
    rows: np.ndarray,
    fields: list[str],
    image_root: Path | None = None,
    ids: IdColumn | None = None,
) -> list[Hit]:
    """One Hit per found row (rows −1, FAISS's "no more hits", left out), in the order found;
    `fields` the metadata columns to return (null values left out), `image_path` resolved
    against `image_root` (module docstring); `ids` the bundle's id column (None: read through
    the bundle)."""
    keep = rows >= 0
    found: list[int] = rows[keep].tolist()
    values: list[float] = scores[keep].tolist()
    if ids is not None:
        names = ids.take(found)
    else:
        names = [str(i) for i in bundle.ids(found)] if found else []
    wanted = [f for f in fields if f != "id"]
    if not wanted or not found:
        return [Hit(i, s, r) for i, s, r in zip(names, values, found, strict=True)]
    metadata: list[dict[str, Any]] = bundle.metadata(found).select(wanted).to_pylist()
    hits = [
        Hit(i, s, r, {k: str(v) for k, v in m.items() if v is not None})
        for i, s, r, m in zip(names, values, found, metadata, strict=True)
    ]
    for hit in hits:
        if IMAGE_PATH in hit.metadata:
            hit.metadata[IMAGE_PATH] = resolve_image_path(hit.metadata[IMAGE_PATH], image_root)
    return hits


def explain_hits(
    bundle: Bundle,
    coder: ConceptCoder,
    hits: list[Hit],
    query_code: tuple[np.ndarray, np.ndarray],
    hit_concepts: int,
) -> list[ConceptActivation]:
    """Give every hit its `hit_concepts` strongest concepts and those it shares with the query
    (in place); the query's own active concepts."""
    q_ids, q_values = query_code
    rows = [h.row for h in hits]
    item_ids, item_values = row_concepts(bundle, rows)
    for hit, ids_row, values_row, words in zip(
        hits, item_ids, item_values, row_words(bundle, rows), strict=True
    ):
        ids_row, values_row = with_words(words, (ids_row, values_row))
        hit.concepts = activations_of(coder, ids_row, values_row, hit_concepts)
        hit.shared_concepts = shared_concepts(coder, q_ids, q_values, ids_row, values_row)
    return activations_of(coder, q_ids, q_values)
