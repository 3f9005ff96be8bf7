"""The search engine over a bundle version exported to Milvus (`strata serve --backend …`).

`MilvusEngine` is a `SearchEngine` whose gallery is a Milvus collection (indexer/milvus_store.py)
instead of local FAISS files: validation, embedding, the GraSP rotation, routing, the concept
catalog and the answer's shape are the engine's own; what changes is where rows are scored.

- direct plan: one Milvus search of the field p{L} (inner product, the stored p_L), every
  unfiltered query of one prefix and setting in one call (nq > 1), as FAISS batches them;
- funnel (asked for): the shortlist is a Milvus search of p{S} for k·F rows that returns their
  p{L}, reranked exactly here (`service.engine.funnel.rerank`'s rule: s_L, ties by row); "auto"
  searches directly, since the engine does the scan (the funnel's calibration measures FAISS);
- concept filter: each reference's concepts become `array_contains_any(concepts, [...])`
  (AND over required references, `not …` for excluded ones), so the filter runs inside the
  engine's search; the allowed rows are counted with `count(*)` over the same expression;
- Explain: the row's concepts and activations and its p_L at every prefix are read back from
  the engine; an item id is found by a query on `item_id`; the descriptions' near captions
  are a search of the engine's full-length field, their text the version's own metadata.

The version's manifest and artifacts (rotation, CEDAR coder, catalog, postings for the
catalog's counts) come from the bundle folder; the FAISS files are not opened. Every engine
call has a deadline; an engine that does not answer makes the batch's queries fail with
`UnavailableError` (gRPC UNAVAILABLE, the message naming the engine), and the next batch tries
again. `AliasFollower` swaps the served engine when the alias moves (a hot swap without Redis).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from indexer.bundle import MANIFEST, Bundle
from indexer.milvus_store import (
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
from service.engine.explain import activations_of, shared_concepts
from service.engine.filtering import resolve_ref
from service.engine.funnel import pad_hits
from service.engine.grouping import grouped_search
from service.engine.metadata_filter import MetadataFilter
from service.engine.search import EngineConfig, SearchEngine, _Prepared
from service.engine.thumbnails import recorded_image_root
from service.errors import (
    NotFoundError,
    QueryError,
    ServiceError,
    UnavailableError,
    echo,
)
from service.limits import check_chars
from service.query.cache import QueryCache
from service.query.embedding import EncoderObserver
from service.results import (
    Explanation,
    Hit,
    MetadataCondition,
    PlanRun,
    PrefixSimilarity,
    SearchQuery,
    SearchResult,
)
from training.core.encoders import Encoder, load_encoder
from training.core.files import sha256_file
from training.core.granularity import Granularity
from training.core.metrics import prefix_vectors

if TYPE_CHECKING:
    from service.api.server import StrataServer

log = logging.getLogger(__name__)

TOPK_MAX = 16_384  # Milvus's limit on hits per search
AUTO_REASON = "auto: the vector engine scans the target prefix directly"


def concept_expression(
    required: Sequence[Sequence[int]], excluded: Sequence[int], field: str = CONCEPTS
) -> str:
    """The Milvus filter of a concept filter: rows holding one of each required reference's
    concepts and none of the excluded ones ("" when there is no filter)."""
    parts = [f"array_contains_any({field}, {sorted(set(map(int, r)))})" for r in required]
    if excluded:
        parts.append(f"not array_contains_any({field}, {sorted(set(map(int, excluded)))})")
    return " and ".join(f"({p})" for p in parts)


def literal(value: Any) -> str:
    """A Python value as a Milvus expression literal (times and dates as the ISO text the
    export stores them as)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if hasattr(value, "isoformat"):
        return string_literal(value.isoformat())
    return string_literal(str(value))


def where_expression(metadata: MetadataFilter, conditions: Sequence[MetadataCondition]) -> str:
    """The Milvus filter of metadata conditions, all of which must hold ("" for none); each is
    checked and typed by the bundle's own table first (QueryError naming the field). A null
    value meets no comparison in Milvus, as in the local filter."""
    parts = []
    for condition in conditions:
        values, name = metadata.values(condition), condition.field
        if condition.equals is not None:
            parts.append(f"{name} == {literal(values[0])}")
        elif condition.any_of is not None:
            parts.append(f"{name} in [{', '.join(literal(v) for v in values)}]")
        else:
            assert condition.range is not None
            low, high = values
            span, tests = condition.range, []
            if low is not None:
                tests.append(f"{name} {'>' if span.min_exclusive else '>='} {literal(low)}")
            if high is not None:
                tests.append(f"{name} {'<' if span.max_exclusive else '<='} {literal(high)}")
            parts.append(" and ".join(tests))
    return " and ".join(f"({p})" for p in parts)


def engine_params(setting: str) -> dict[str, Any]:
    """Milvus search parameters of a FAISS ParameterSpace setting ("efSearch=64" → ef 64;
    nprobe as it is); what Milvus has no counterpart for is dropped."""
    params: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in setting.split(","))):
        key, _, value = part.partition("=")
        if key == "efSearch":
            params["ef"] = int(value)
        elif key == "nprobe":
            params["nprobe"] = int(value)
    return params


def string_literal(value: str) -> str:
    """A Milvus expression's string literal (double quotes, JSON escapes)."""
    return json.dumps(value)


@dataclass
class _EnginePrepared(_Prepared):
    expression: str = ""
    allowed_count: int | None = None


class MilvusEngine(SearchEngine):
    """Search, explanation and catalog look-ups over one exported bundle version (above)."""

    def __init__(
        self,
        bundle: Bundle,
        encoder: Encoder | None,
        store: MilvusStore,
        collection: str,
        config: EngineConfig | None = None,
        cache: QueryCache | None = None,
        name: str = DEFAULT_NAME,
        ef: int | None = None,
    ) -> None:
        self.bundle, self.encoder, self.store = bundle, encoder, store
        self.ef = ef  # an HNSW field's search breadth where the request's setting names none
        self.collection, self.name = collection, name
        self.config = config or EngineConfig()
        self.cache = cache
        if encoder is not None and encoder.dim != bundle.dim:
            raise ServiceError(
                f"encoder {encoder.id} is {encoder.dim}-d, but bundle {bundle.name} is "
                f"{bundle.dim}-d"
            )
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
        self.image_root = self.config.image_root or recorded_image_root(bundle)
        self.planner = None  # type: ignore[assignment]

    @classmethod
    def open_backend(
        cls,
        target: str,
        bundles: str | Path,
        name: str = DEFAULT_NAME,
        device: str = "auto",
        batch_size: int = 128,
        config: EngineConfig | None = None,
        cache: QueryCache | None = None,
        timeout_s: float = 5.0,
        encoder: Encoder | None = None,
    ) -> MilvusEngine:
        """The version the alias `name` names at `target`, its manifest and artifacts read from
        the bundle directory `bundles`, with the encoder its manifest names."""
        store = MilvusStore(target, timeout_s)
        collection = store.current(name)
        if collection is None:
            raise ExportError(
                f"no alias {name!r} at {target}: run `strata index export --to {target}` first"
            )
        bundle = Bundle.open_version(Path(bundles).expanduser() / store.record(collection).bundle)
        if encoder is None:
            spec = bundle.manifest.encoder
            if not spec:
                raise ServiceError(f"bundle {bundle.path} records no encoder")
            encoder = load_encoder(spec, device=device, batch_size=batch_size)
        return cls(bundle, encoder, store, collection, config, cache, name)

    def following(self, collection: str) -> MilvusEngine:
        """The engine over another collection of this alias (its version's folder next to the
        served one), sharing encoder, config, cache and connection."""
        bundle = Bundle.open_version(self.bundle.path.parent / self.store.record(collection).bundle)
        return MilvusEngine(
            bundle, self.encoder, self.store, collection, self.config, self.cache, self.name,
            self.ef,
        )  # fmt: skip

    def with_bundle(self, bundle: Bundle) -> SearchEngine:
        raise ServiceError(
            "the Milvus backend follows its alias: publish a version with `strata index export`"
        )

    # --- search ---

    def search_batch(
        self, queries: Sequence[SearchQuery], observer: EncoderObserver | None = None
    ) -> list[SearchResult | ServiceError]:
        try:
            return super().search_batch(queries, observer)
        except EngineUnavailable as exc:
            log.warning("%s", exc)
            return [UnavailableError(str(exc)) for _ in queries]

    def _prepared(self, query: SearchQuery) -> _Prepared:
        return _EnginePrepared(query)

    def _restrict(self, prepared: _Prepared, length: int) -> None:
        """The filter as one Milvus expression (metadata conditions and concepts, run inside
        the engine's search), the rows it allows, and the plan."""
        assert isinstance(prepared, _EnginePrepared)
        query = prepared.query
        filters = [where_expression(self.metadata, query.where)]
        if query.require or query.exclude:
            bundle, scope = self.bundle, query.scope
            required = [resolve_ref(bundle, r, "require", scope) for r in query.require]
            excluded = [c for r in query.exclude for c in resolve_ref(bundle, r, "exclude", scope)]
            filters.append(concept_expression(required, excluded))
        prepared.expression = " and ".join(f"({f})" for f in filters if f)
        if prepared.expression:
            try:
                prepared.allowed_count = self.count(prepared.expression)
            except EngineUnavailable as exc:
                raise UnavailableError(str(exc)) from None
        prepared.plan = self._plan(query, length, prepared.allowed_count)

    def count(self, expression: str) -> int:
        found = self.store.call(
            "counting rows", self.store.client.query, self.collection, filter=expression,
            output_fields=["count(*)"],
        )  # fmt: skip
        return int(found[0]["count(*)"])

    def _plan(self, query: SearchQuery, length: int, allowed: int | None) -> PlanRun:
        asked = query.plan
        if asked.kind == "direct":
            return PlanRun("direct", "requested")
        if asked.kind != "funnel" and not asked.shortlist_prefix and not asked.factor:
            return PlanRun("direct", AUTO_REASON)
        below = sorted(n for n in self.bundle.prefix_lengths if n < length)
        if not below:
            raise QueryError(f"no funnel at prefix {length}: the contract has no shorter prefix")
        shortlist = asked.shortlist_prefix or below[0]
        if shortlist not in below:
            raise QueryError(
                f"shortlist prefix {shortlist} is not a prefix of the bundle below the target "
                f"{length}; choose from {', '.join(map(str, below))}"
            )
        factor = asked.factor or self.config.funnel.default_factor
        rows = self.bundle.rows if allowed is None else allowed
        return PlanRun(
            "funnel", "requested", shortlist, factor, min(query.k * factor, rows, TOPK_MAX)
        )

    def _search(self, live: list[_Prepared], rotated: np.ndarray) -> None:
        groups: dict[tuple[int, str, str, int, int], list[int]] = defaultdict(list)
        found: dict[int, list[dict[str, Any]]] = {}
        for i, p in enumerate(live):
            assert p.route is not None and p.plan is not None and isinstance(p, _EnginePrepared)
            if p.query.group_by:
                found[i] = self._grouped(p, rotated[i : i + 1])
                continue
            length = self.contract[p.route.granularity]
            key = (length, p.setting, p.expression, p.plan.shortlist_prefix, p.plan.factor)
            groups[key].append(i)
        for (length, setting, expression, shortlist, factor), members in groups.items():
            fields = self._output_fields([live[i].query for i in members])
            k = max(live[i].query.k for i in members)
            if factor:
                rows = max(live[i].plan.shortlist_rows for i in members)  # type: ignore[union-attr]
                answers = self._engine_search(
                    rotated[members], shortlist, rows, expression, setting,
                    [*fields, vector_field(length)],
                )  # fmt: skip
                for j, i in enumerate(members):
                    found[i] = _reranked(answers[j], rotated[i], length, live[i].query.k)
            else:
                answers = self._engine_search(rotated[members], length, k, expression, setting,
                                              fields)  # fmt: skip
                for j, i in enumerate(members):
                    found[i] = answers[j][: live[i].query.k]
        explained = [i for i, p in enumerate(live) if p.query.explain]
        codes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if explained:
            ids, values = self.coder.encode(np.stack([live[i].embedding for i in explained]))
            codes = {i: (ids[j], values[j]) for j, i in enumerate(explained)}
        for i, p in enumerate(live):
            p.result = self._engine_result(p, found[i], codes.get(i))  # type: ignore[arg-type]

    def _grouped(self, p: _EnginePrepared, rotated: np.ndarray) -> list[dict[str, Any]]:
        """A grouped query's hits, group by group (service/engine/grouping.py widens the engine's
        search until it has top_k full groups), each hit's group code in `p.groups`."""
        assert p.route is not None and p.plan is not None
        length = self.contract[p.route.granularity]
        codes, _ = self.metadata.group_keys(p.query.group_by)
        fields = self._output_fields([p.query])
        by_row: dict[int, dict[str, Any]] = {}

        def ranked(k: int) -> tuple[np.ndarray, np.ndarray]:
            if p.plan is not None and p.plan.factor:
                shortlist = min(k * p.plan.factor, TOPK_MAX)
                answer = self._engine_search(
                    rotated, p.plan.shortlist_prefix, shortlist, p.expression, p.setting,
                    [*fields, vector_field(length)],
                )[0]  # fmt: skip
                answer = _reranked(answer, rotated[0], length, k)
            else:
                answer = self._engine_search(rotated, length, k, p.expression, p.setting, fields)[0]
            by_row.update((int(h[ROW]), h) for h in answer)
            rows = np.array([int(h[ROW]) for h in answer] + [-1] * (k - len(answer)), np.int64)
            scores = np.array([h["distance"] for h in answer] + [0.0] * (k - len(answer)))
            return scores[None, :].astype(np.float32), rows[None, :]

        available = self.bundle.rows if p.allowed_count is None else p.allowed_count
        cap = TOPK_MAX // p.plan.factor if p.plan.factor else TOPK_MAX
        _, rows, p.groups = grouped_search(
            ranked, codes, p.query.k, p.query.group_size or 1, available, max(cap, 1)
        )
        return [by_row[int(r)] for r in rows]

    def _output_fields(self, queries: list[SearchQuery]) -> list[str]:
        fields = {ROW, ITEM_ID}
        for q in queries:
            fields.update(f for f in q.metadata_fields if f != "id")
            if q.explain:
                fields.update((CONCEPTS, ACTIVATIONS))
        return sorted(fields)

    def _engine_search(
        self,
        rotated: np.ndarray,
        length: int,
        k: int,
        expression: str,
        setting: str,
        fields: list[str],
    ) -> list[list[dict[str, Any]]]:
        """Each query's hits as Milvus returns them: entity fields, `distance` = s_L."""
        vectors = prefix_vectors(rotated, length)
        answers = self.store.call(
            "searching", self.store.client.search, self.collection, data=list(vectors),
            anns_field=vector_field(length), limit=min(int(k), TOPK_MAX), filter=expression,
            output_fields=fields,
            search_params={"metric_type": "IP", "params": self._params(setting, k)},
        )  # fmt: skip
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
        p: _EnginePrepared,
        found: list[dict[str, Any]],
        query_code: tuple[np.ndarray, np.ndarray] | None,
    ) -> SearchResult:
        assert p.route is not None
        wanted = [f for f in p.query.metadata_fields if f != "id"]
        hits = [
            Hit(
                id=str(h[ITEM_ID]),
                score=float(h["distance"]),
                row=int(h[ROW]),
                metadata={f: str(h[f]) for f in wanted if h.get(f) is not None},
            )
            for h in found
        ]
        if p.groups is not None:
            _, labels = self.metadata.group_keys(p.query.group_by)
            for hit, code in zip(hits, p.groups, strict=True):
                hit.group = str(labels[code])
        result = SearchResult(
            granularity=p.route.granularity,
            prefix_length=self.contract[p.route.granularity],
            routing_reason=p.route.reason,
            hits=hits,
            filtered_rows=p.allowed_count,
            bundle_version=self.bundle.version,
            plan=p.plan,
        )
        if query_code is not None:
            q_ids, q_values = query_code
            for hit, h in zip(hits, found, strict=True):
                ids, values = _concepts_of(h)
                hit.concepts = activations_of(self.coder, ids, values, self.config.hit_concepts)
                hit.shared_concepts = shared_concepts(self.coder, q_ids, q_values, ids, values)
            result.query_concepts = activations_of(self.coder, q_ids, q_values)
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
        """SearchEngine.explain over the engine's rows: the row, its concepts and its p_L at
        every prefix read back; near captions searched in the engine (`nearest_rows`)."""
        self.check_explain(query, near_captions)
        try:
            entity = self._entity(item_id, row)
        except EngineUnavailable as exc:
            raise UnavailableError(str(exc)) from None
        embedding, q_ids, q_values = self.explained_query(query, observer)
        rotated = self.bundle.rotate(embedding)
        item_ids, item_values = _concepts_of(entity)
        similarities = []
        for granularity, length in sorted(self.contract.items(), key=lambda g: g[1]):
            stored = np.asarray(entity[vector_field(length)], dtype=np.float32)
            cosine = float(prefix_vectors(rotated, length)[0] @ stored)
            similarities.append(PrefixSimilarity(Granularity(granularity), length, cosine))
        query_description, item_description = self.describe_pair(
            (q_ids, q_values), (item_ids, item_values), int(entity[ROW]), near_captions
        )
        return Explanation(
            item_id=str(entity[ITEM_ID]),
            row=int(entity[ROW]),
            similarities=similarities,
            shared_concepts=shared_concepts(self.coder, q_ids, q_values, item_ids, item_values),
            query_concepts=activations_of(self.coder, q_ids, q_values),
            item_concepts=activations_of(self.coder, item_ids, item_values),
            bundle_version=self.bundle.version,
            query_description=query_description,
            item_description=item_description,
        )

    def nearest_rows(
        self, length: int, rotated: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The descriptions' search, in the engine: (scores, rows) padded with row −1."""
        try:
            answers = self._engine_search(rotated, length, k, "", "", [ROW])
        except EngineUnavailable as exc:
            raise UnavailableError(str(exc)) from None
        scores = np.zeros((len(answers), k), dtype=np.float32)
        rows = np.full((len(answers), k), -1, dtype=np.int64)
        for i, answer in enumerate(answers):
            for j, hit in enumerate(answer[:k]):
                scores[i, j], rows[i, j] = hit["distance"], int(hit[ROW])
        return scores, rows

    def _entity(self, item_id: str | None, row: int | None) -> dict[str, Any]:
        """One row's fields and vectors, read from the engine; NotFoundError when absent."""
        if (item_id is None) == (row is None):
            raise QueryError("name the item by its id or by its row, one of them")
        if item_id is not None:
            if not item_id:
                raise QueryError("empty item id")
            check_chars("an item id", item_id, self.config.limits.id_chars)
            expression = f"{ITEM_ID} == {string_literal(item_id)}"
        else:
            if not 0 <= int(row) < self.bundle.rows:  # type: ignore[arg-type]
                raise NotFoundError(
                    f"row {row} outside [0, {self.bundle.rows}) of {self.bundle.name}"
                )
            expression = f"{ROW} == {int(row)}"  # type: ignore[arg-type]
        fields = [ROW, ITEM_ID, CONCEPTS, ACTIVATIONS,
                  *(vector_field(n) for n in self.bundle.prefix_lengths)]  # fmt: skip
        found = self.store.call(
            "reading a row", self.store.client.query, self.collection, filter=expression,
            output_fields=fields, limit=1,
        )  # fmt: skip
        if not found:
            what = f"item {echo(item_id)}" if item_id is not None else f"row {row}"
            raise NotFoundError(f"no {what} in bundle {self.bundle.name}")
        return dict(found[0])

    def row_of(self, item_id: str | None = None, row: int | None = None) -> int:
        try:
            return int(self._entity(item_id, row)[ROW])
        except EngineUnavailable as exc:
            raise UnavailableError(str(exc)) from None


def _concepts_of(entity: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.asarray(entity.get(CONCEPTS) or [], dtype=np.int64),
        np.asarray(entity.get(ACTIVATIONS) or [], dtype=np.float32),
    )


def _reranked(
    shortlist: list[dict[str, Any]], rotated: np.ndarray, length: int, k: int
) -> list[dict[str, Any]]:
    """A funnel's shortlist (with each row's p_L) reranked exactly by s_L, ties by row."""
    if not shortlist:
        return []
    rows = np.array([h[ROW] for h in shortlist], dtype=np.int64)
    vectors = np.asarray([h[vector_field(length)] for h in shortlist], dtype=np.float32)
    scores = vectors @ prefix_vectors(rotated[None, :], length)[0]
    order = np.lexsort((rows, -scores))[:k]
    _, top = pad_hits(scores[order].astype(np.float32), rows[order], k)
    by_row = {h[ROW]: h for h in shortlist}
    return [
        {**by_row[int(r)], "distance": float(scores[o])}
        for r, o in zip(top[0], order, strict=False)
        if r >= 0
    ]


class AliasFollower:
    """Polls the alias every `poll_s` seconds; when it names another collection, builds the
    engine over it (off the event loop) and swaps it into `server` — the zero-downtime switch
    `strata index export` makes. A failed poll or load is logged; the served engine stays."""

    def __init__(self, server: StrataServer, poll_s: float = 2.0) -> None:
        engine = server.served.engine
        if not isinstance(engine, MilvusEngine):
            raise ServiceError("the alias follower needs a Milvus-backed engine")
        self.server, self.poll_s = server, poll_s
        self.swaps, self.failures = 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="alias-follower", daemon=True)

    def start(self) -> AliasFollower:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.poll_s + 10)

    def check(self) -> bool:
        """One poll: swap when the alias moved; True when it swapped."""
        engine = self.server.served.engine
        assert isinstance(engine, MilvusEngine)
        current = engine.store.current(engine.name)
        if current is None or current == engine.collection:
            return False
        new = engine.following(current)
        self.server.swap_engine(new)
        self.swaps += 1
        log.info("alias %s: now %s", engine.name, current)
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.check()
            except Exception as exc:  # the served engine stays; the next poll tries again
                self.failures += 1
                log.warning("following the alias failed: %s", exc)
