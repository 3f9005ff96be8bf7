"""What the Milvus scorer (service/engine/milvus/scorer.py) reads back from an exported
collection, as the local engine's parts: a row's entity by item id or row number, its concept
code split into word and axis concepts, a search's answers as padded (scores, rows) or as the
plans' `RowHits`, and a shortlist's returned vectors as the rows a funnel reranks from."""

from __future__ import annotations

from typing import Any

import numpy as np

from indexer.format.bundle import Bundle
from indexer.milvus.store import ACTIVATIONS, CONCEPTS, ITEM_ID, ROW, MilvusStore, vector_field
from service.engine.batch_search import RowHits
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


def row_hits(answer: list[dict[str, Any]], k: int) -> RowHits:
    """One search answer (each hit's entity fields and its `distance`) as the plans' hits:
    scores and rows padded to k, each row's entity kept."""
    rows = np.array([int(h[ROW]) for h in answer], dtype=np.int64)
    scores = np.array([h["distance"] for h in answer], dtype=np.float32)
    return RowHits.padded(scores, rows, k, {int(h[ROW]): h for h in answer})


class ReturnedRows:
    """A shortlist's exact p_L as Milvus returned them with its hits (the field p{L} of each
    row's entity): where the funnel reranks from (indexer/format/funnel.py's RerankRows)."""

    def __init__(self, entities: dict[int, dict[str, Any]], length: int) -> None:
        self.entities, self.field = entities, vector_field(length)

    def prefix_scores(self, rows: np.ndarray, length: int, query: np.ndarray) -> np.ndarray:
        vectors = np.asarray([self.entities[int(r)][self.field] for r in rows], np.float32)
        return (vectors.reshape(len(rows), -1) @ query).astype(np.float32)
