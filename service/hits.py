"""A search's hits from the rows FAISS found: ids, scores and metadata; with explain, each hit's
strongest concepts and the concepts it shares with the query (service/explain.py).

Image paths: a cache embedded from an image corpus stores `image_path` relative to the corpus
root (training/embedding/job.py); a hit returns it resolved against the engine's image root
(`strata serve --image-root`, else the root the cache recorded). An absolute path — what
caches held before — is returned as stored."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from indexer.bundle import Bundle
from service.explain import activations_of, row_concepts, row_words, shared_concepts, with_words
from service.results import ConceptActivation, Hit
from training.cedar.concepts import ConceptCoder

IMAGE_PATH = "image_path"


def resolve_image_path(value: str, root: Path | None) -> str:
    """A stored image path as a hit returns it: relative ones joined to `root` (when given),
    absolute ones unchanged."""
    if root is None or PurePosixPath(value).is_absolute() or Path(value).is_absolute():
        return value
    return str(root / value)


def hits_of(
    bundle: Bundle,
    scores: np.ndarray,
    rows: np.ndarray,
    fields: list[str],
    image_root: Path | None = None,
) -> list[Hit]:
    """One Hit per found row (rows −1, FAISS's "no more hits", left out), in the order found;
    `fields` the metadata columns to return (null values left out), `image_path` resolved
    against `image_root` (module docstring)."""
    keep = rows >= 0
    scores, rows = scores[keep], rows[keep]
    ids = bundle.ids(rows) if len(rows) else []
    wanted = [f for f in fields if f != "id"]
    metadata: list[dict[str, Any]] = (
        bundle.metadata(rows).select(wanted).to_pylist() if wanted and len(rows) else []
    )
    hits = [
        Hit(
            id=str(ids[j]),
            score=float(scores[j]),
            row=int(rows[j]),
            metadata={
                k: str(v) for k, v in (metadata[j] if metadata else {}).items() if v is not None
            },
        )
        for j in range(len(rows))
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
