"""What the Milvus scorer (service/engine/milvus/scorer.py) reads back from an exported
collection, as the local engine's parts: a row's entity by item id or row number, its concept
code split into word and axis concepts, and a search's answers as padded (scores, rows)."""

from __future__ import annotations

from typing import Any

import numpy as np

from indexer.format.bundle import Bundle
from indexer.milvus.store import ACTIVATIONS, CONCEPTS, ITEM_ID, ROW, MilvusStore, vector_field
from service.engine.milvus.expressions import string_literal
from service.engine.scoring import check_item
from service.errors import NotFoundError, echo
from service.limits import RequestLimits

Code = tuple[np.ndarray, np.ndarray]


def entity_code(entity: dict[str, Any], axis_concepts: int) -> tuple[Code, Code]:
    """A row's (word concepts, axis concepts) from its `concepts` and `activations`, each
    strongest first, as the local engine reads them from the postings (ids from
    `axis_concepts` on are word concepts)."""
    ids = np.asarray(entity.get(CONCEPTS) or [], dtype=np.int64)
    values = np.asarray(entity.get(ACTIVATIONS) or [], dtype=np.float32)
    word = ids >= axis_concepts
    return (ids[word], values[word]), (ids[~word], values[~word])


def read_entity(
    store: MilvusStore,
    collection: str,
    bundle: Bundle,
    limits: RequestLimits,
    item_id: str | None,
    row: int | None,
) -> dict[str, Any]:
    """One row's fields and vectors (the item asked: `check_item`), read from the engine;
    NotFoundError when absent."""
    checked = check_item(item_id, row, bundle, limits)
    if checked is None:
        expression = f"{ITEM_ID} == {string_literal(item_id)}"  # type: ignore[arg-type]
    else:
        expression = f"{ROW} == {checked}"
    fields = [
        ROW,
        ITEM_ID,
        CONCEPTS,
        ACTIVATIONS,
        *(vector_field(n) for n in bundle.prefix_lengths),
    ]
    found = store.call(
        "reading a row",
        store.client.query,
        collection,
        filter=expression,
        output_fields=fields,
        limit=1,
    )
    if not found:
        what = f"item {echo(item_id)}" if item_id is not None else f"row {row}"
        raise NotFoundError(f"no {what} in bundle {bundle.name}")
    return dict(found[0])


def padded_rows(answers: list[list[dict[str, Any]]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Search answers (each hit's `distance` and row) as (scores, rows) [Q, k], padded with
    row −1 as FAISS pads them."""
    scores = np.zeros((len(answers), k), dtype=np.float32)
    rows = np.full((len(answers), k), -1, dtype=np.int64)
    for i, answer in enumerate(answers):
        for j, hit in enumerate(answer[:k]):
            scores[i, j], rows[i, j] = hit["distance"], int(hit[ROW])
    return scores, rows
