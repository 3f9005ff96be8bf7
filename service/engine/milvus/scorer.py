"""The search engine over a bundle version exported to Milvus (`strata serve --backend …`).

`MilvusScorer` is the `SearchEngine`'s scorer (service/engine/scoring.py) when its gallery is a
Milvus collection (indexer/milvus/store.py) instead of local FAISS files: validation,
embedding, the GraSP rotation, routing, Explain, the concept catalog and the answer's shape
are the engine's own; what changes is where rows are scored. The engine over it is opened by
service/engine/milvus/backend.py.

- searches: the plans run once for both engines (service/engine/batch_search.py); this
  scorer supplies its rows (`EngineRows`): one Milvus search of the field p{L} (inner product,
  the stored p_L) per group of queries sharing a filter expression (nq > 1), each hit's entity
  fields returned with it; a funnel's shortlist at p{S} returns its rows' p{L} too, which the
  shared rerank reads (`ReturnedRows`); "auto" funnels by a calibration measured on the
  engine (service/engine/milvus/calibration.py);
- filters: concept references and metadata conditions become one Milvus expression
  (service/engine/milvus/expressions.py), so the filter runs inside the engine's search; the
  allowed rows are counted with `count(*)` over the same expression;
- Explain: the row's concepts and activations and its p_L at every prefix are read back from
  the engine; an item id is found by a query on `item_id`; the descriptions' near captions
  are a search of the engine's full-length field, their text the version's own metadata.

The version's manifest and artifacts (rotation, CEDAR coder, catalog, postings for the
catalog's counts) come from the bundle folder; the FAISS files are not opened. Every engine
call has a deadline; an engine that does not answer makes the batch's queries fail with
`UnavailableError` (gRPC UNAVAILABLE, the message naming the engine), and the next batch tries
again. `AliasFollower` (service/serving/alias_follower.py) swaps the served engine when the
alias moves (a hot swap without Redis).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from indexer.format.bundle import Bundle
from indexer.format.funnel import RerankRows
from indexer.format.manifest import MANIFEST
from indexer.milvus.store import (
    ACTIVATIONS,
    CONCEPTS,
    DEFAULT_NAME,
    ITEM_ID,
    ROW,
    EngineUnavailable,
    ExportError,
    MilvusStore,
    vector_field,
)
from service.engine.batch_search import PlannedSearch, RowHits, batch_search
from service.engine.explain import activations_of, explained_codes, shared_concepts, with_words
from service.engine.filtering import open_phrase, resolve_ref
from service.engine.metadata_filter import MetadataFilter
from service.engine.milvus.calibration import TOPK_MAX, calibrated_funnels
from service.engine.milvus.entities import (
    ReturnedRows,
    entity_code,
    padded_rows,
    read_entity,
    row_hits,
)
from service.engine.milvus.expressions import (
    concept_expression,
    engine_params,
    rows_expression,
    where_expression,
)
from service.engine.open_vocabulary import OpenVocabulary
from service.engine.plans import plan_query
from service.engine.scoring import (
    EngineConfig,
    PreparedQuery,
    StoredRow,
    query_result,
)
from service.errors import UnavailableError
from service.results import Hit, PlanRun, SearchQuery, SearchResult
from training.core.files import sha256_file
from training.core.metrics import prefix_vectors

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MilvusFilter:
    """A query's rows in Milvus: its filter expression ("" for none) and the rows it allows
    (None: every row)."""

    expression: str = ""
    count: int | None = None


class MilvusScorer:
    """Scores one exported bundle version's rows in its Milvus collection (module docstring)."""

    def __init__(
        self,
        bundle: Bundle,
        store: MilvusStore,
        collection: str,
        config: EngineConfig,
        name: str = DEFAULT_NAME,
        ef: int | None = None,
        vocabulary: OpenVocabulary | None = None,
    ) -> None:
        self.bundle, self.store, self.config = bundle, store, config
        self.ef = ef  # an HNSW field's search breadth where the request's setting names none
        self.collection, self.name = collection, name
        record = store.record(collection)
        if record.bundle != bundle.name:
            raise ExportError(f"{collection} holds bundle {record.bundle}, not {bundle.name}")
        if sha256_file(bundle.path / MANIFEST) != record.manifest_sha256:
            raise ExportError(
                f"{collection} was exported from another {bundle.name} than {bundle.path}"
            )
        self.record = record
        self.coder, self.contract = bundle.coder, bundle.contract
        _ = bundle.grasp
        self.metadata_fields = list(record.metadata_fields)
        # conditions are checked and typed, and groups coded, by the version's own table
        self.metadata = MetadataFilter(bundle.metadata_table())
        # a phrase the catalog lacks, made a zero-shot concept beside the engine (the engine's
        # encoder embeds the phrase)
        self.vocabulary = vocabulary
        self.planned = PlannedSearch(self, self.metadata, bundle.rows)
        try:  # AUTO's funnel, calibrated as the local engine calibrates its own
            self.choices, self.direct_reasons = calibrated_funnels(self)
        except EngineUnavailable as exc:
            raise UnavailableError(str(exc)) from None

    def restrict(self, prepared: PreparedQuery) -> None:
        """The filter as one Milvus expression (metadata conditions and concepts, run inside
        the engine's search), the rows it allows, and the plan."""
        query = prepared.query
        filters = [where_expression(self.metadata, query.where)]
        if query.require or query.exclude:
            bundle, scope, vocabulary = self.bundle, query.scope, self.vocabulary
            opened = {
                r: open_phrase(bundle, r, scope, vocabulary)
                for r in (*query.require, *query.exclude)
            }
            required = [
                resolve_ref(bundle, r, "require", scope) for r in query.require if not opened[r]
            ]
            excluded = [
                c
                for r in query.exclude
                if not opened[r]
                for c in resolve_ref(bundle, r, "exclude", scope)
            ]
            filters.append(concept_expression(required, excluded))
            if vocabulary is not None:  # zero-shot phrases: their rows, made beside the engine
                for r in query.require:
                    if phrase := opened[r]:
                        filters.append(rows_expression(self._phrase_rows(phrase)))
                for r in query.exclude:
                    if phrase := opened[r]:
                        filters.append(rows_expression(self._phrase_rows(phrase), negate=True))
        expression = " and ".join(f"({f})" for f in filters if f)
        count = None
        if expression:
            try:
                count = self.count(expression)
            except EngineUnavailable as exc:
                raise UnavailableError(str(exc)) from None
        prepared.allowed = MilvusFilter(expression, count)
        prepared.plan = self._plan(query, prepared.length, count)

    def _phrase_rows(self, phrase: str) -> np.ndarray:
        """A zero-shot phrase's rows (service/engine/open_vocabulary.py), made beside the engine
        from the version's stored full-length vectors and kept; sent to Milvus as a row list."""
        assert self.vocabulary is not None
        return self.vocabulary.concept(phrase).rows.materialise()

    follows_alias = True  # AliasFollower swaps the engine when the alias moves

    def moved_to(self) -> str | None:
        """The collection the alias names now, where it moved off this one; else None."""
        current = self.store.current(self.name)
        return None if current is None or current == self.collection else current

    def count(self, expression: str) -> int:
        found = self.store.call(
            "counting rows",
            self.store.client.query,
            self.collection,
            filter=expression,
            output_fields=["count(*)"],
        )
        return int(found[0]["count(*)"])

    def _plan(self, query: SearchQuery, length: int, allowed: int | None) -> PlanRun:
        """The engines' one planner (service/engine/plans.py), its shortlist at most what one
        Milvus search returns."""
        return plan_query(
            query,
            length,
            self.bundle.rows,
            allowed,
            self.choices,
            self.direct_reasons,
            self.bundle.prefix_lengths,
            self.config.funnel.default_factor,
            self.config.exact_max,
            TOPK_MAX,
        )

    def search(self, live: Sequence[PreparedQuery], rotated: np.ndarray) -> None:
        try:
            found = batch_search(self.planned, live, rotated)  # service/engine/batch_search.py
        except EngineUnavailable as exc:
            raise UnavailableError(str(exc)) from None
        codes = explained_codes(self.bundle, live)
        for i, p in enumerate(live):
            p.result = self._engine_result(p, found[i], codes.get(i))

    # --- what the plans run on (service/engine/batch_search.py's EngineRows) ---

    search_cap = TOPK_MAX

    def shares_call(self, p: PreparedQuery) -> Hashable:
        """Queries of one filter expression share one Milvus call (nq > 1)."""
        return self._restriction(p).expression

    def search_rows(
        self,
        members: Sequence[PreparedQuery],
        rotated: np.ndarray,
        length: int,
        k: int,
        setting: str,
        rerank_at: int | None = None,
    ) -> list[RowHits]:
        """One Milvus search of the field p{L} inside the members' expression, the hits'
        entity fields returned with them (with `rerank_at`, the rows' p at that target too)."""
        fields = self._output_fields([p.query for p in members])
        if rerank_at is not None:
            fields.append(vector_field(rerank_at))
        expression = self._restriction(members[0]).expression
        answers = self.engine_search(rotated, length, k, expression, setting, fields)
        return [row_hits(answer, k) for answer in answers]

    def rerank_rows(self, shortlist: RowHits, length: int) -> RerankRows:
        """The shortlist's p_L, as the search returned them."""
        return ReturnedRows(shortlist.fields, length)

    @staticmethod
    def _restriction(p: PreparedQuery) -> MilvusFilter:
        """The query's rows in Milvus (`restrict` sets a MilvusFilter on every query)."""
        assert isinstance(p.allowed, MilvusFilter)
        return p.allowed

    def _output_fields(self, queries: list[SearchQuery]) -> list[str]:
        fields = {ROW, ITEM_ID}
        for q in queries:
            fields.update(f for f in q.metadata_fields if f != "id")
            if q.explain:
                fields.update((CONCEPTS, ACTIVATIONS))
        return sorted(fields)

    def engine_search(
        self,
        rotated: np.ndarray,
        length: int,
        k: int,
        expression: str,
        setting: str,
        fields: list[str],
        deadline_s: float | None = None,
    ) -> list[list[dict[str, Any]]]:
        """Each query's hits as Milvus returns them: entity fields, `distance` = s_L
        (`deadline_s`: the call's deadline, else the store's)."""
        vectors = prefix_vectors(rotated, length)
        answers = self.store.call(
            "searching",
            self.store.client.search,
            self.collection,
            deadline_s=deadline_s,
            data=list(vectors),
            anns_field=vector_field(length),
            limit=min(int(k), TOPK_MAX),
            filter=expression,
            output_fields=fields,
            search_params={"metric_type": "IP", "params": self._params(setting, k)},
        )
        return [
            [{**hit["entity"], "distance": float(hit["distance"])} for hit in answer]
            for answer in answers
        ]

    def _params(self, setting: str, k: int) -> dict[str, Any]:
        params = engine_params(setting)
        if self.ef is not None and "ef" not in params:
            params["ef"] = max(self.ef, min(int(k), TOPK_MAX))
        return params

    def _engine_result(
        self,
        p: PreparedQuery,
        found: RowHits,
        query_code: tuple[np.ndarray, np.ndarray] | None,
    ) -> SearchResult:
        wanted = [f for f in p.query.metadata_fields if f != "id"]
        entities = [found.fields[int(r)] for r in found.rows if r >= 0]
        hits = [
            Hit(
                id=str(h[ITEM_ID]),
                score=float(score),
                row=int(h[ROW]),
                metadata={f: str(h[f]) for f in wanted if h.get(f) is not None},
            )
            for h, score in zip(entities, found.scores, strict=False)
        ]
        result = query_result(p, hits, self.metadata, self.bundle.version)
        if query_code is not None:
            q_ids, q_values = query_code
            for hit, h in zip(hits, entities, strict=True):
                ids, values = with_words(*entity_code(h, self.coder.axis_concepts))
                hit.concepts = activations_of(self.coder, ids, values, self.config.hit_concepts)
                hit.shared_concepts = shared_concepts(self.coder, q_ids, q_values, ids, values)
            result.query_concepts = activations_of(self.coder, q_ids, q_values)
        return result

    # --- Explain ---

    def stored_row(self, item_id: str | None, row: int | None) -> StoredRow:
        """The row, its concepts and its p_L at every prefix, read back from the engine."""
        try:
            entity = read_entity(
                self.store, self.collection, self.bundle, self.config.limits, item_id, row
            )
        except EngineUnavailable as exc:
            raise UnavailableError(str(exc)) from None
        words, axes = entity_code(entity, self.coder.axis_concepts)
        return StoredRow(
            row=int(entity[ROW]),
            item_id=str(entity[ITEM_ID]),
            axes=axes,
            words=words if self.coder.readout is not None else None,
            prefixes={
                length: np.asarray(entity[vector_field(length)], dtype=np.float32)
                for length in self.contract.values()
            },
        )

    def nearest_rows(
        self, length: int, rotated: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The descriptions' search, in the engine: (scores, rows) padded with row −1."""
        try:
            answers = self.engine_search(rotated, length, k, "", "", [ROW])
        except EngineUnavailable as exc:
            raise UnavailableError(str(exc)) from None
        return padded_rows(answers, k)
