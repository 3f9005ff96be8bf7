"""The search engine: a loaded bundle and its encoder, with no network in sight.

`SearchEngine.search_batch(queries)` is the unit the server micro-batches:

1. validate each query (service/query_checks.py: one text, image or vector; top_k in
   [1, 1000]; a known granularity, concepts and metadata fields) — a bad query fails alone,
   with a `QueryError` naming it;
2. embed (service/query_embedding.py): every text of the batch in one `encode_text` call
   (with a query cache, only the distinct texts it does not hold: service/query_cache.py),
   every image in one `encode_image` call, each call timed into the caller's metrics;
   vectors are normalised; one GraSP rotation for the whole batch;
3. route each query to a prefix length: its granularity, or AUTO's choice (service/routing.py;
   image and vector queries go to the full vector);
4. plan and search (service/plans.py): direct, or a funnel that shortlists at a short prefix
   and reranks exactly at the target (service/funnel.py); unfiltered queries of one prefix
   length, search setting (a query's min_recall picks one of the index's tuned operating
   points, service/operating_points.py) and plan in one FAISS call; each filtered query over
   its allowed rows only (service/filtering.py) — a concept filter's rows and the rows meeting
   the metadata conditions `where` (service/metadata_filter.py), intersected; a grouped query
   (`group_by`) widens its own search until it holds top_k groups (service/grouping.py);
5. describe the hits: ids, requested metadata, and with `explain` the query's active concepts,
   each hit's strongest concepts and the concepts they share (service/explain.py).

Catalog look-ups and the index's description are service/catalog.py's. Scores are s_L, the
cosine of the first L rotated coordinates. The engine is not thread-safe
for searches (the encoder is not); the server runs them on one executor thread.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import ConfigDict

from indexer.bundle import Bundle
from indexer.ids import IDS
from indexer.verify import check_servable
from service.catalog import catalog_page, describe_index, find_concepts
from service.descriptions import describe_codes, stack_codes
from service.errors import InternalError, NotFoundError, QueryError, ServiceError, echo
from service.explain import (
    activations_of,
    prefix_similarities,
    row_concepts,
    row_words,
    shared_concepts,
    with_words,
)
from service.filtering import EXACT_MAX, AllowedRows, allowed_rows, filtered_search
from service.grouping import FETCH_MAX, grouped_search
from service.hits import IdColumn, explain_hits, hits_of
from service.limits import LIMITS, RequestLimits, check_chars, check_near_captions
from service.metadata_filter import MetadataFilter
from service.operating_points import check_min_recall, setting_for
from service.plans import FunnelConfig, Planner
from service.query_cache import QueryCache
from service.query_checks import (
    check_grouping,
    check_query,
    check_query_input,
    parse_granularity,
)
from service.query_embedding import EncoderObserver, embed_texts, encode
from service.results import (
    MAX_SHORTLIST,
    ConceptInfo,
    ConceptPage,
    ConceptRef,
    Description,
    Explanation,
    IndexInfo,
    PlanRun,
    SearchQuery,
    SearchResult,
)
from service.routing import Route, route_text
from service.thumbnails import recorded_image_root
from training.core.config import ConfigModel
from training.core.encoders import Encoder, load_encoder
from training.core.encoders.images import decode_image
from training.core.errors import InputError
from training.core.granularity import Granularity
from training.core.metrics import prefix_vectors

log = logging.getLogger(__name__)


class EngineConfig(ConfigModel):
    """`exact_max`: filtered searches allowing at most this many rows score them exactly;
    `hit_concepts`: a hit's strongest concepts returned with explain; `limits`: what one
    request may ask for (service/limits.py); `funnel`: when "auto" funnels (service/plans.py);
    `image_root`: the folder relative `image_path` values are resolved against (None: the one
    the bundle's cache recorded, else they are returned as stored: service/hits.py)."""

    model_config = ConfigDict(frozen=True)

    exact_max: int = EXACT_MAX
    hit_concepts: int = 5
    limits: RequestLimits = LIMITS
    funnel: FunnelConfig = FunnelConfig()
    image_root: Path | None = None


@dataclass
class _Prepared:
    """A validated query on its way through the batch."""

    query: SearchQuery
    embedding: np.ndarray | None = None
    error: ServiceError | None = None
    route: Route | None = None
    setting: str = ""  # search parameters other than the index's own (service/operating_points.py)
    allowed: AllowedRows | None = None
    plan: PlanRun | None = None
    image: Any = None  # the decoded PIL image, between decoding and encoding
    groups: list[int] | None = None  # group_by: each hit's group code (MetadataFilter.group_keys)
    result: SearchResult | None = None


class SearchEngine:
    """Search, explanation and catalog look-ups over one loaded bundle version."""

    def __init__(
        self,
        bundle: Bundle,
        encoder: Encoder | None,
        config: EngineConfig | None = None,
        cache: QueryCache | None = None,
    ):
        self.bundle = bundle.load()
        self.encoder = encoder
        self.config = config or EngineConfig()
        self.cache = cache  # text queries' embeddings (service/query_cache.py); None: no cache
        if encoder is not None and encoder.dim != bundle.dim:
            raise ServiceError(
                f"encoder {encoder.id} is {encoder.dim}-d, "
                f"but bundle {bundle.name} is {bundle.dim}-d"
            )
        self.coder = bundle.coder
        self.contract = bundle.contract
        self._ids: pa.ChunkedArray = pq.read_table(bundle.path / IDS, columns=["id"]).column("id")
        self.id_column = IdColumn(self._ids)  # a hit's id without an Arrow call (service/hits.py)
        self.metadata = MetadataFilter(bundle.metadata_table())  # read now, while the folder exists
        self.metadata_fields = list(self.metadata.schema)
        self.image_root = self.config.image_root or recorded_image_root(bundle)
        self.planner = Planner(self.bundle, self.config.funnel)

    def with_bundle(self, bundle: Bundle) -> SearchEngine:
        """A new engine over `bundle` sharing this one's encoder, config and query cache (what
        a hot swap serves next)."""
        return SearchEngine(bundle, self.encoder, self.config, self.cache)

    @classmethod
    def open(
        cls,
        bundles: str | Path,
        device: str = "auto",
        batch_size: int = 128,
        config: EngineConfig | None = None,
        cache: QueryCache | None = None,
        translator: Path | None = None,
        verify: bool = True,
    ) -> SearchEngine:
        """The published version of a bundle directory, with the encoder its manifest names.

        The version is verified first (`indexer.verify.check_servable`; `VersionRefusedError`
        naming the file when it fails) unless `verify` is False. With `translator` (a folder
        written by `strata upgrade`), queries are embedded by the translator's source model and
        translated into the bundle's space instead.
        """
        bundle = Bundle.open(bundles)
        if verify:
            check_servable(bundle.path)
        spec = bundle.manifest.encoder
        if not spec:
            raise ServiceError(f"bundle {bundle.path} records no encoder to embed queries with")
        encoder: Encoder
        if translator is not None:
            from service.translation import translated_encoder

            encoder = translated_encoder(translator, spec, bundle.dim, device, batch_size)
        else:
            encoder = load_encoder(spec, device=device, batch_size=batch_size)
        log.info(
            "bundle %s: %d rows, encoder %s on %s", bundle.name, bundle.rows, encoder.id,
            encoder.device,
        )  # fmt: skip
        return cls(bundle, encoder, config, cache)

    # --- search ---

    def search(self, query: SearchQuery) -> SearchResult:
        """One query; raises its QueryError."""
        result = self.search_batch([query])[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def search_batch(
        self, queries: Sequence[SearchQuery], observer: EncoderObserver | None = None
    ) -> list[SearchResult | ServiceError]:
        """Every query's result, or its own error, in order (steps in the module docstring);
        the encoder calls timed into `observer` (a server's metrics), if any."""
        prepared = [self._prepare(q) for q in queries]
        self._embed(prepared, observer)
        if live := [p for p in prepared if p.error is None]:  # rotated as far as searched
            head = max(self.contract[p.route.granularity] for p in live)  # type: ignore[union-attr]
            self._search(live, self.bundle.grasp.apply(np.stack([p.embedding for p in live]), head))
        return [p.error if p.error is not None else p.result for p in prepared]  # type: ignore[misc]

    def _prepare(self, query: SearchQuery) -> _Prepared:
        prepared = self._prepared(query)
        try:
            prepared.embedding = check_query(  # a vector query's unit vector
                query, self.config.limits, self.metadata_fields, self.bundle.dim, self.encoder
            )
            prepared.route = self.route(query)
            check_min_recall(query.min_recall)
            length = self.contract[prepared.route.granularity]
            prepared.setting = setting_for(self.bundle.manifest.prefix(length), query.min_recall)
            check_grouping(query, self.config.limits)
            if query.group_by:
                self.metadata.check_field(query.group_by, "group_by")
            self._restrict(prepared, length)
        except ServiceError as exc:
            prepared.error = exc
        except Exception as exc:  # a bug fails its own query (INTERNAL), not its whole batch
            log.exception("preparing a query failed")
            prepared.error = InternalError(f"internal error: {exc!r}")
        return prepared

    def _prepared(self, query: SearchQuery) -> _Prepared:
        """A query's fresh state (a backend's engine adds its own fields)."""
        return _Prepared(query)

    def _restrict(self, prepared: _Prepared, length: int) -> None:
        """The rows a checked query may return (its concept filter and metadata conditions)
        and its plan at prefix `length`."""
        query = prepared.query
        self.metadata.check(query.where)
        if query.require or query.exclude:
            prepared.allowed = allowed_rows(self.bundle, query.require, query.exclude, query.scope)
        if query.where:
            base = prepared.allowed or AllowedRows.everything(self.bundle.rows)
            prepared.allowed = base.within(self.metadata.rows(query.where))
        prepared.plan = self.planner.plan(query, length, prepared.allowed, self.config.exact_max)

    def _embed(self, prepared: list[_Prepared], observer: EncoderObserver | None) -> None:
        """Unit embeddings for every live query: one encoder call per modality (timed into
        `observer`: service/query_embedding.py)."""
        texts = [p for p in prepared if p.error is None and p.query.text is not None]
        images = [p for p in prepared if p.error is None and p.query.image is not None]
        for p in prepared:
            if p.error is None and p.query.vector is not None and p.embedding is None:
                values = np.asarray(p.query.vector, dtype=np.float64)
                p.embedding = (values / np.linalg.norm(values)).astype(np.float32)
        if texts:
            assert self.encoder is not None
            rows = embed_texts(self.encoder, self.cache, [p.query.text for p in texts], observer)
            for p, row in zip(texts, rows, strict=True):
                p.embedding = row
        decoded = []
        for p in images:
            try:
                p.image = decode_image(p.query.image)
                decoded.append(p)
            except InputError as exc:
                p.error = QueryError(f"undecodable image: {exc}")
        if decoded:
            assert self.encoder is not None
            rows = encode(self.encoder, "image", [p.image for p in decoded], observer)
            for p, row in zip(decoded, rows, strict=True):
                p.embedding, p.image = row, None

    def route(self, query: SearchQuery) -> Route:
        """Where a query goes: its granularity, or AUTO's choice (text: by rule; else full)."""
        granularity = parse_granularity(query.granularity)
        if granularity is not None:
            return Route(granularity, "requested")
        if query.text is not None:
            return route_text(query.text)
        kind = "image" if query.image is not None else "vector"
        return Route(Granularity.FULL, f"auto on a{'n' if kind == 'image' else ''} {kind} query")

    def _search(self, live: list[_Prepared], rotated: np.ndarray) -> None:
        groups: dict[tuple[int, str, int, int], list[int]] = defaultdict(list)  # (L, setting, S, F)
        found: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for i, p in enumerate(live):
            assert p.route is not None and p.plan is not None
            length = self.contract[p.route.granularity]
            if p.query.group_by:
                found[i] = self._grouped(p, rotated[i : i + 1], length)
            elif p.allowed is None:
                groups[length, p.setting, p.plan.shortlist_prefix, p.plan.factor].append(i)
            else:
                found[i] = self._search_one(p, rotated[i : i + 1], length, p.query.k)
        for (length, setting, shortlist, factor), members in groups.items():
            k = max(live[i].query.k for i in members)
            if factor:
                scores, rows = self.planner.funnel(shortlist, factor, rotated[members], length, k)
            else:
                scores, rows = self.bundle.search_prefix(length, rotated[members], k, setting)
            for j, i in enumerate(members):
                found[i] = (
                    scores[j : j + 1, : live[i].query.k],
                    rows[j : j + 1, : live[i].query.k],
                )
        explained = [i for i, p in enumerate(live) if p.query.explain]
        codes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if explained:
            embedded = np.stack([live[i].embedding for i in explained])
            ids, values = self.coder.encode(embedded)
            words = self.coder.active_words(embedded)
            codes = {i: with_words(words[j], (ids[j], values[j])) for j, i in enumerate(explained)}
        for i, p in enumerate(live):
            scores, rows = found[i]
            p.result = self._result(p, scores[0], rows[0], codes.get(i))

    def _search_one(
        self, p: _Prepared, rotated: np.ndarray, length: int, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """One query's k best rows by its plan, inside its allowed rows if it has any."""
        assert p.plan is not None
        funnel = p.plan.kind == "funnel"
        if p.allowed is None:
            if funnel:
                return self.planner.funnel(
                    p.plan.shortlist_prefix, p.plan.factor, rotated, length, k
                )
            return self.bundle.search_prefix(length, rotated, k, p.setting)
        if funnel:
            return self.planner.filtered_funnel(
                p.plan, rotated, length, k, p.allowed, self.config.exact_max
            )
        index = self.bundle.index(length)
        query = prefix_vectors(rotated, length)
        return filtered_search(index, query, k, p.allowed, self.config.exact_max, p.setting)

    def _grouped(
        self, p: _Prepared, rotated: np.ndarray, length: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """A grouped query's hits, group by group (service/grouping.py); their group codes
        kept in `p.groups`."""
        assert p.plan is not None
        codes, _ = self.metadata.group_keys(p.query.group_by)
        available = self.bundle.rows if p.allowed is None else p.allowed.count
        cap = MAX_SHORTLIST // p.plan.factor if p.plan.kind == "funnel" else FETCH_MAX
        scores, rows, p.groups = grouped_search(
            lambda k: self._search_one(p, rotated, length, k),
            codes, p.query.k, p.query.group_size or 1, available, max(cap, 1),
        )  # fmt: skip
        return scores[None, :], rows[None, :]

    def _result(
        self,
        p: _Prepared,
        scores: np.ndarray,
        rows: np.ndarray,
        query_code: tuple[np.ndarray, np.ndarray] | None,
    ) -> SearchResult:
        assert p.route is not None
        fields = list(p.query.metadata_fields)
        hits = hits_of(self.bundle, scores, rows, fields, self.image_root, self.id_column)
        if p.groups is not None:
            _, labels = self.metadata.group_keys(p.query.group_by)
            for hit, code in zip(hits, p.groups, strict=True):
                hit.group = str(labels[code])
        result = SearchResult(
            granularity=p.route.granularity,
            prefix_length=self.contract[p.route.granularity],
            routing_reason=p.route.reason,
            hits=hits,
            filtered_rows=None if p.allowed is None else p.allowed.count,
            bundle_version=self.bundle.version,
            plan=p.plan,
        )
        if query_code is not None:
            result.query_concepts = explain_hits(
                self.bundle, self.coder, hits, query_code, self.config.hit_concepts
            )
        return result

    # --- explanation ---

    def explain(
        self,
        query: SearchQuery,
        item_id: str | None = None,
        row: int | None = None,
        observer: EncoderObserver | None = None,
        near_captions: int = 0,
    ) -> Explanation:
        """Shared concepts and per-prefix cosines of a query and one item (by id or row), and a
        description of each one's code (service/descriptions.py) with `near_captions` nearest
        captions (0: the phrases only, no search); the encoder call timed into `observer`."""
        self.check_explain(query, near_captions)
        row = self.row_of(item_id, row)
        embedding, q_axis_ids, q_axis_values = self.explained_query(query, observer)
        q_axes = (q_axis_ids, q_axis_values)
        item_axes = tuple(a[0] for a in row_concepts(self.bundle, [row]))
        query_description, item_description = self.describe_pair(
            q_axes, item_axes, row, near_captions
        )
        q_ids, q_values = with_words(self.coder.active_words(embedding)[0], q_axes)
        item_ids, item_values = with_words(row_words(self.bundle, [row])[0], item_axes)
        return Explanation(
            item_id=str(self.bundle.ids([row])[0]),
            row=row,
            similarities=prefix_similarities(self.bundle, self.bundle.rotate(embedding), row),
            shared_concepts=shared_concepts(self.coder, q_ids, q_values, item_ids, item_values),
            query_concepts=activations_of(self.coder, q_ids, q_values),
            item_concepts=activations_of(self.coder, item_ids, item_values),
            bundle_version=self.bundle.version,
            query_description=query_description,
            item_description=item_description,
        )

    # the opening and the descriptions of every engine's Explain (MilvusEngine's too)

    def check_explain(self, query: SearchQuery, near_captions: int) -> None:
        """QueryError unless the query is one valid text, image or vector and near_captions
        lies within the limit."""
        if len(query.kinds) != 1:
            raise QueryError("give one query: a text, an image or a vector")
        check_query_input(query, self.config.limits, self.bundle.dim, self.encoder)
        check_near_captions(near_captions, self.config.limits)

    def explained_query(
        self, query: SearchQuery, observer: EncoderObserver | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The query embedded ([1, D]) and its code: (embedding, concept ids, activations)."""
        prepared = _Prepared(query)
        self._embed([prepared], observer)
        if prepared.error is not None:
            raise prepared.error
        embedding = prepared.embedding[None, :]
        q_ids, q_values = (a[0] for a in self.coder.encode(embedding))
        return embedding, q_ids, q_values

    def describe_pair(
        self,
        query_code: tuple[np.ndarray, np.ndarray],
        item_code: tuple[np.ndarray, np.ndarray],
        row: int,
        near_captions: int,
    ) -> list[Description]:
        """The descriptions of a query's and an item's code (the item's row excluded from the
        item's captions), captions found by `nearest_rows`."""
        codes = stack_codes([query_code, item_code])
        return describe_codes(
            self.bundle, self.coder, *codes, near_captions, [(), (row,)], self.nearest_rows
        )

    def nearest_rows(
        self, length: int, rotated: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) of the `k` rows nearest at prefix `length` (Bundle.search_prefix)."""
        return self.bundle.search_prefix(length, rotated, k)

    def row_of(self, item_id: str | None = None, row: int | None = None) -> int:
        """The row of an item id (or a row checked to exist); NotFoundError otherwise."""
        if (item_id is None) == (row is None):
            raise QueryError("name the item by its id or by its row, one of them")
        if item_id is not None:
            if not item_id:
                raise QueryError("empty item id")
            check_chars("an item id", item_id, self.config.limits.id_chars)
            found = pc.index(self._ids, pa.scalar(item_id, pa.string())).as_py()
            if found < 0:
                raise NotFoundError(f"no item {echo(item_id)} in bundle {self.bundle.name}")
            return int(found)
        if not 0 <= int(row) < self.bundle.rows:
            raise NotFoundError(f"row {row} outside [0, {self.bundle.rows}) of {self.bundle.name}")
        return int(row)

    # --- the catalog ---

    def list_concepts(
        self, name_contains: str = "", page_size: int = 0, page_token: str = ""
    ) -> ConceptPage:
        """A page of the catalog (`service.catalog.catalog_page`)."""
        return catalog_page(self.bundle, name_contains, page_size, page_token, self.config.limits)

    def get_concept(self, ref: ConceptRef | str | int) -> list[ConceptInfo]:
        """Every concept a reference stands for (`service.catalog.find_concepts`)."""
        return find_concepts(self.bundle, ref, self.config.limits)

    def info(self) -> IndexInfo:
        return describe_index(self.bundle, self.metadata.schema, self.encoder)
