"""The engine's scorer over the bundle's own files: FAISS prefix indexes, postings, ids.

- restrict: a concept filter's rows (service/engine/filtering.py) and the rows meeting the
  metadata conditions `where` (service/engine/metadata_filter.py), intersected; the plan
  (service/engine/plans.py): direct, or a funnel that shortlists at a short prefix and reranks
  exactly at the target (service/engine/funnel.py);
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

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from indexer.format.bundle import Bundle
from indexer.format.ids import IDS
from indexer.format.row_bitmaps import AllowedRows
from service.engine.batch_search import batch_search, grouped_hits
from service.engine.explain import explained_codes, item_prefixes, row_concepts, row_words
from service.engine.filter_blocks import FilterBlocks
from service.engine.filtering import allowed_rows, filtered_search
from service.engine.grouping import FETCH_MAX
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
from service.results import MAX_SHORTLIST, PlanKind, SearchResult
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
        found = batch_search(self, live, rotated)  # service/engine/batch_search.py
        codes = explained_codes(self.bundle, live)
        for i, p in enumerate(live):
            scores, rows = found[i]
            p.result = self.result(p, scores[0], rows[0], codes.get(i))

    def together_key(self, p: PreparedQuery) -> tuple[int, str, int, int] | None:
        """Unfiltered queries of one prefix, setting and plan share one FAISS call."""
        assert p.plan is not None
        if p.allowed is not None:
            return None
        return p.length, p.setting, p.plan.shortlist_prefix, p.plan.factor

    def together(
        self, members: Sequence[PreparedQuery], rotated: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        first = members[0]
        assert first.plan is not None
        length, factor = first.length, first.plan.factor
        k = max(p.query.k for p in members)
        if factor:
            shortlist = first.plan.shortlist_prefix
            scores, rows = self.planner.funnel(shortlist, factor, rotated, length, k)
        else:
            scores, rows = self.bundle.search_prefix(length, rotated, k, first.setting)
        return [
            (scores[j : j + 1, : p.query.k], rows[j : j + 1, : p.query.k])
            for j, p in enumerate(members)
        ]

    def one(self, p: PreparedQuery, rotated: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self._search_one(p, rotated, p.length, k)

    def _search_one(
        self, p: PreparedQuery, rotated: np.ndarray, length: int, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """One query's k best rows by its plan, inside its allowed rows if it has any."""
        assert p.plan is not None
        funnel = p.plan.kind == PlanKind.FUNNEL
        if p.allowed is None:
            if funnel:
                return self.planner.funnel(
                    p.plan.shortlist_prefix, p.plan.factor, rotated, length, k
                )
            return self.bundle.search_prefix(length, rotated, k, p.setting)
        if funnel:
            return self.planner.filtered_funnel(
                p.plan, rotated, length, k, p.allowed, self.config.exact_max, self.blocks
            )
        index = self.bundle.index(length)
        query = prefix_vectors(rotated, length)
        return filtered_search(
            index, query, k, p.allowed, self.config.exact_max, p.setting, self.blocks
        )

    def grouped(self, p: PreparedQuery, rotated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A grouped query's hits, group by group (service/engine/batch_search.py)."""
        assert p.plan is not None
        cap = MAX_SHORTLIST // p.plan.factor if p.plan.kind == PlanKind.FUNNEL else FETCH_MAX
        return grouped_hits(
            p, self.metadata, lambda k: self.one(p, rotated, k), self.bundle.rows, cap
        )

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
