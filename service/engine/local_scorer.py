"""The engine's scorer over the bundle's own files: FAISS prefix indexes, postings, ids.

- restrict: a concept filter's rows (service/engine/filtering.py) and the rows meeting the
  metadata conditions `where` (service/engine/metadata_filter.py), intersected; the plan
  (service/engine/plans.py): direct, or a funnel that shortlists at a short prefix and reranks
  exactly at the target (indexer/format/funnel.py);
- search: unfiltered queries of one prefix length, search setting (a query's min_recall picks
  one of the index's tuned operating points, service/engine/operating_points.py) and plan in
  one FAISS call; each filtered query over its allowed rows only; a grouped query (`group_by`)
  widens its own search until it holds top_k groups (service/engine/grouping.py);
- hits: ids, requested metadata, and with `explain` the query's active concepts, each hit's
  strongest concepts and the concepts they share (service/engine/hits.py, explain.py);
- Explain's row: its axis and word concepts from the postings, its p_L from the prefix
  indexes that store vectors exactly (service/engine/explain.py).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from indexer.format.bundle import Bundle
from indexer.format.funnel import RerankRows
from indexer.format.ids import IDS
from indexer.format.row_bitmaps import AllowedRows
from indexer.format.served.params import SearchParams
from service.engine.batch_search import PlannedSearch, RowHits, batch_search
from service.engine.explain import explained_codes, item_prefixes, row_concepts, row_words
from service.engine.filter_blocks import FilterBlocks
from service.engine.filtering import allowed_rows, filtered_search
from service.engine.hits import IdColumn, explain_hits, hits_of
from service.engine.metadata_filter import MetadataFilter
from service.engine.open_vocabulary import OpenVocabulary
from service.engine.plans import Planner
from service.engine.scoring import (
    EngineConfig,
    PreparedQuery,
    StoredRow,
    check_item,
    query_result,
)
from service.errors import NotFoundError, echo
from service.results import MAX_SHORTLIST, SearchResult
from training.core.metrics import prefix_vectors


class LocalScorer:
    """Scores a loaded bundle version's rows with its FAISS indexes (module docstring)."""

    def __init__(
        self,
        bundle: Bundle,
        config: EngineConfig,
        image_root: Path | None,
        vocabulary: OpenVocabulary | None = None,
    ) -> None:
        self.bundle, self.config, self.image_root = bundle, config, image_root
        self.vocabulary = vocabulary  # a name the catalog lacks, made a zero-shot concept
        self.metadata = MetadataFilter(bundle.metadata_table())  # read now, while the folder exists
        self.coder = bundle.coder
        self._ids: pa.ChunkedArray = pq.read_table(bundle.path / IDS, columns=["id"]).column("id")
        self.id_column = IdColumn(self._ids)  # a hit's id without an Arrow call (engine/hits.py)
        self.metadata_fields = list(self.metadata.schema)
        self.planner = Planner(bundle, config.funnel)
        self.planned = PlannedSearch(self, self.metadata, bundle.rows)
        budget = config.filter_block_bytes
        self.blocks = FilterBlocks(budget) if budget else None  # this version's, kept with it

    follows_alias = False  # a new version comes by a hot swap (SearchEngine.with_bundle)

    def moved_to(self) -> str | None:
        return None

    # --- search ---

    def restrict(self, prepared: PreparedQuery) -> None:
        query, length = prepared.query, prepared.length
        self.metadata.check(query.where)
        if query.require or query.exclude:
            prepared.allowed = allowed_rows(
                self.bundle,
                query.require,
                query.exclude,
                query.scope,
                self.blocks,
                self.vocabulary,
            )
        if query.where:
            base = prepared.allowed or AllowedRows.everything(self.bundle.rows)
            prepared.allowed = base.within(self.metadata.rows(query.where))
        prepared.plan = self.planner.plan(query, length, prepared.allowed, self.config.exact_max)

    def search(self, live: Sequence[PreparedQuery], rotated: np.ndarray) -> None:
        found = batch_search(self.planned, live, rotated)  # service/engine/batch_search.py
        codes = explained_codes(self.bundle, live)
        for i, p in enumerate(live):
            p.result = self.result(p, found[i].scores, found[i].rows, codes.get(i))

    # --- what the plans run on (service/engine/batch_search.py's EngineRows) ---

    search_cap = MAX_SHORTLIST

    def shares_call(self, p: PreparedQuery) -> Hashable | None:
        """Unfiltered queries share one FAISS call; a filtered one is searched alone."""
        return None if p.allowed is not None else ""

    def search_rows(
        self,
        members: Sequence[PreparedQuery],
        rotated: np.ndarray,
        length: int,
        k: int,
        setting: str,
        rerank_at: int | None = None,
    ) -> list[RowHits]:
        """Each member's k best rows at prefix L, inside its allowed rows if it has any; a
        funnel's shortlist (`rerank_at`) searches the shortlist view of the prefix with the
        parameters the calibration chose for it."""
        allowed = members[0].allowed
        index = self.bundle.index(length)
        if rerank_at is not None:
            setting = self.planner.shortlist_search(rerank_at, length)
            if allowed is None:
                index = self.planner.shortlists[length]
                k = min(k, int(index.ntotal))
        query = prefix_vectors(rotated, length)
        if allowed is None:
            params = SearchParams.parse(setting) if setting else None
            scores, rows = index.search(query, k, params)
        else:
            scores, rows = filtered_search(
                index, query, k, allowed, self.config.exact_max, setting, self.blocks
            )
        return [RowHits(scores[j], rows[j]) for j in range(len(members))]

    def rerank_rows(self, shortlist: RowHits, length: int) -> RerankRows:
        exact = self.planner.exact(length)
        assert exact is not None  # the plan funnels only where the bundle keeps exact rows
        return exact

    def result(
        self,
        p: PreparedQuery,
        scores: np.ndarray,
        rows: np.ndarray,
        query_code: tuple[np.ndarray, np.ndarray] | None,
    ) -> SearchResult:
        """A query's answer from its scored rows (and its code, when explained)."""
        fields = list(p.query.metadata_fields)
        hits = hits_of(self.bundle, scores, rows, fields, self.image_root, self.id_column)
        result = query_result(p, hits, self.metadata, self.bundle.version)
        if query_code is not None:
            result.query_concepts = explain_hits(
                self.bundle, self.coder, hits, query_code, self.config.hit_concepts
            )
        return result

    # --- Explain ---

    def stored_row(self, item_id: str | None, row: int | None) -> StoredRow:
        row = self.row_of(item_id, row)
        return StoredRow(
            row=row,
            item_id=str(self.bundle.ids([row])[0]),
            axes=tuple(a[0] for a in row_concepts(self.bundle, [row])),  # type: ignore[arg-type]
            words=row_words(self.bundle, [row])[0],
            prefixes=item_prefixes(self.bundle, row),
        )

    def nearest_rows(
        self, length: int, rotated: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        return self.bundle.search_prefix(length, rotated, k)

    def row_of(self, item_id: str | None = None, row: int | None = None) -> int:
        """The row of an item id (or a row checked to exist: `check_item`); NotFoundError
        otherwise."""
        checked = check_item(item_id, row, self.bundle, self.config.limits)
        if checked is not None:
            return checked
        found = pc.index(self._ids, pa.scalar(item_id, pa.string())).as_py()
        if found < 0:
            raise NotFoundError(f"no item {echo(item_id)} in bundle {self.bundle.name}")
        return int(found)
