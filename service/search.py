"""The search engine: a loaded bundle and its encoder, with no network in sight.

`SearchEngine.search_batch(queries)` is the unit the server micro-batches:

1. validate each query (one text, image or vector; top_k in [1, 1000]; a known granularity,
   concepts and metadata fields) — a bad query fails alone, with a `QueryError` naming it;
2. embed: every text of the batch in one `encode_text` call (with a query cache, only the
   distinct texts it does not hold: service/query_cache.py), every image in one
   `encode_image` call; vectors are normalised; one GraSP rotation for the whole batch;
3. route each query to a prefix length: its granularity, or AUTO's choice (service/routing.py;
   image and vector queries go to the full vector);
4. search: unfiltered queries of one prefix length in one FAISS call; each filtered query over
   its allowed rows only (service/filtering.py);
5. describe the hits: ids, requested metadata, and with `explain` the query's active concepts,
   each hit's strongest concepts and the concepts they share (service/explain.py).

Scores are s_L, the cosine of the first L rotated coordinates. The engine is not thread-safe
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

from indexer.bundle import Bundle
from indexer.ids import IDS
from indexer.verify import check_servable
from service.errors import InternalError, NotFoundError, QueryError, ServiceError, echo
from service.explain import (
    activations_of,
    prefix_similarities,
    row_concepts,
    shared_concepts,
)
from service.filtering import EXACT_MAX, AllowedRows, allowed_rows, filtered_search, resolve_ref
from service.limits import LIMITS, RequestLimits, check_chars, check_fields, check_filter
from service.query_cache import QueryCache, normalise_query
from service.results import (
    AUTO,
    GRANULARITY_CHOICES,
    MAX_K,
    SCOPES,
    ConceptInfo,
    ConceptPage,
    ConceptRef,
    Explanation,
    Hit,
    IndexInfo,
    PrefixInfo,
    SearchQuery,
    SearchResult,
)
from service.routing import Route, route_text
from training.cedar.concepts import CatalogEntry
from training.core.encoders import Encoder, load_encoder
from training.core.encoders.images import decode_image
from training.core.errors import InputError
from training.core.granularity import Granularity
from training.core.metrics import prefix_vectors

log = logging.getLogger(__name__)

DEFAULT_PAGE = 100
MAX_PAGE = 1000


@dataclass(frozen=True)
class EngineConfig:
    """`exact_max`: filtered searches allowing at most this many rows score them exactly;
    `hit_concepts`: a hit's strongest concepts returned with explain; `limits`: what one
    request may ask for (service/limits.py)."""

    exact_max: int = EXACT_MAX
    hit_concepts: int = 5
    limits: RequestLimits = LIMITS


@dataclass
class _Prepared:
    """A validated query on its way through the batch."""

    query: SearchQuery
    embedding: np.ndarray | None = None
    error: ServiceError | None = None
    route: Route | None = None
    allowed: AllowedRows | None = None
    image: Any = None  # the decoded PIL image, between decoding and encoding
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
        self.metadata_fields = [n for n in pq.read_schema(bundle.path / IDS).names if n != "id"]
        self._ids: pa.ChunkedArray = pq.read_table(bundle.path / IDS, columns=["id"]).column("id")
        bundle.metadata(np.zeros(0, dtype=np.int64))  # read the table now, while the folder exists

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

    def search_batch(self, queries: Sequence[SearchQuery]) -> list[SearchResult | ServiceError]:
        """Every query's result, or its own error, in order (steps in the module docstring)."""
        prepared = [self._prepare(q) for q in queries]
        self._embed(prepared)
        live = [p for p in prepared if p.error is None]
        if live:
            rotated = self.bundle.rotate(np.stack([p.embedding for p in live]))
            self._search(live, rotated)
        return [p.error if p.error is not None else p.result for p in prepared]  # type: ignore[misc]

    def _prepare(self, query: SearchQuery) -> _Prepared:
        prepared = _Prepared(query)
        try:
            self._validate(query)
            prepared.route = self.route(query)
            if query.require or query.exclude:
                prepared.allowed = allowed_rows(
                    self.bundle, query.require, query.exclude, query.scope
                )
        except ServiceError as exc:
            prepared.error = exc
        except Exception as exc:  # a bug fails its own query (INTERNAL), not its whole batch
            log.exception("preparing a query failed")
            prepared.error = InternalError(f"internal error: {exc!r}")
        return prepared

    def _granularity(self, value: str) -> Granularity | None:
        text = str(value).strip().lower() or AUTO
        if text == AUTO:
            return None
        try:
            return Granularity(text)
        except ValueError:
            raise QueryError(
                f"unknown granularity {echo(value)}; choose from {', '.join(GRANULARITY_CHOICES)}"
            ) from None

    def _validate(self, query: SearchQuery) -> None:
        kinds = query.kinds
        if not kinds:
            raise QueryError("the query is empty: give a text, an image or a vector")
        if len(kinds) > 1:
            raise QueryError(f"give one of text, image or vector, not {' and '.join(kinds)}")
        if not isinstance(query.k, int) or not 1 <= query.k <= MAX_K:
            raise QueryError(f"top_k must lie in [1, {MAX_K}], got {query.k}")
        if query.scope not in SCOPES:
            raise QueryError(
                f"unknown concept scope {echo(query.scope)}; choose from {', '.join(SCOPES)}"
            )
        limits = self.config.limits
        if query.explain and query.k > limits.explain_hits:
            raise QueryError(
                f"explain covers at most {limits.explain_hits} hits; top_k is {query.k}"
            )
        check_filter([*query.require, *query.exclude], limits)
        check_fields(query.metadata_fields, limits)
        unknown = [f for f in query.metadata_fields if f not in self.metadata_fields and f != "id"]
        if unknown:
            shown = ", ".join(map(echo, unknown[:3])) + (", …" if len(unknown) > 3 else "")
            raise QueryError(
                f"unknown metadata field(s) {shown}; "
                f"the bundle has {', '.join(self.metadata_fields) or 'none'}"
            )
        self._check_query_input(query.text, query.image, query.vector)

    def _check_query_input(
        self, text: str | None, image: bytes | None, vector: Sequence[float] | None
    ) -> None:
        if text is not None:
            if not text.strip():
                raise QueryError("empty text query")
            if len(text) > self.config.limits.text_chars:
                raise QueryError(
                    f"text query of {len(text)} characters; at most {self.config.limits.text_chars}"
                )
            self._need_encoder("text")
        elif image is not None:
            if not image:
                raise QueryError("empty image query")
            encoder = self._need_encoder("image")
            if not encoder.has_image_tower:
                raise QueryError(
                    f"the bundle's encoder {encoder.id} has no image tower: image queries need "
                    "a bundle embedded with open_clip"
                )
        elif vector is not None:
            values = np.asarray(vector, dtype=np.float64)
            if values.ndim != 1 or len(values) != self.bundle.dim:
                raise QueryError(
                    f"the vector has {values.size} values; the bundle's dimension is "
                    f"{self.bundle.dim}"
                )
            if not np.isfinite(values).all():
                raise QueryError("the vector holds NaN or Inf")
            if not np.linalg.norm(values) > 0:
                raise QueryError("the vector is all zeros")

    def _need_encoder(self, kind: str) -> Encoder:
        if self.encoder is None:
            raise QueryError(f"this engine has no encoder: {kind} queries are not served")
        return self.encoder

    def _embed(self, prepared: list[_Prepared]) -> None:
        """Unit embeddings for every live query: one encoder call per modality."""
        texts = [p for p in prepared if p.error is None and p.query.text is not None]
        images = [p for p in prepared if p.error is None and p.query.image is not None]
        for p in prepared:
            if p.error is None and p.query.vector is not None:
                # float64: a float32 norm overflows (values ~1e20) or underflows (~1e-23)
                values = np.asarray(p.query.vector, dtype=np.float64)
                p.embedding = (values / np.linalg.norm(values)).astype(np.float32)
        if texts:
            self._embed_texts(texts)
        decoded = []
        for p in images:
            try:
                p.image = decode_image(p.query.image)
                decoded.append(p)
            except InputError as exc:
                p.error = QueryError(f"undecodable image: {exc}")
        if decoded:
            assert self.encoder is not None
            rows = self.encoder.encode_image([p.image for p in decoded])
            for p, row in zip(decoded, rows, strict=True):
                p.embedding, p.image = row, None

    def _embed_texts(self, texts: list[_Prepared]) -> None:
        """Text queries: with a cache, look each up first (its normalised text), then embed the
        distinct misses in one encoder call and store them; without one, embed them all."""
        assert self.encoder is not None
        if self.cache is None:
            rows = self.encoder.encode_text([p.query.text for p in texts])
            for p, row in zip(texts, rows, strict=True):
                p.embedding = row
            return
        encoder_id = self.encoder.id
        found = self.cache.lookup(encoder_id, self.encoder.dim, [p.query.text for p in texts])
        missing: dict[str, list[_Prepared]] = {}  # normalised text -> its queries
        for p, row in zip(texts, found, strict=True):
            if row is not None:
                p.embedding = row
            else:
                missing.setdefault(normalise_query(p.query.text), []).append(p)
        if not missing:
            return
        unique = list(missing)
        rows = self.encoder.encode_text(unique)
        self.cache.store(encoder_id, [missing[t][0].query.text for t in unique], rows)
        for text, row in zip(unique, rows, strict=True):
            for p in missing[text]:
                p.embedding = row

    def route(self, query: SearchQuery) -> Route:
        """Where a query goes: its granularity, or AUTO's choice (text: by rule; else full)."""
        granularity = self._granularity(query.granularity)
        if granularity is not None:
            return Route(granularity, "requested")
        if query.text is not None:
            return route_text(query.text)
        kind = "image" if query.image is not None else "vector"
        return Route(Granularity.FULL, f"auto on a{'n' if kind == 'image' else ''} {kind} query")

    def _search(self, live: list[_Prepared], rotated: np.ndarray) -> None:
        groups: dict[int, list[int]] = defaultdict(list)
        found: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for i, p in enumerate(live):
            assert p.route is not None
            length = self.contract[p.route.granularity]
            if p.allowed is None:
                groups[length].append(i)
            else:
                index = self.bundle.index(length)
                query = prefix_vectors(rotated[i : i + 1], length)
                found[i] = filtered_search(
                    index, query, p.query.k, p.allowed, self.config.exact_max
                )
        for length, members in groups.items():
            k = max(live[i].query.k for i in members)
            scores, rows = self.bundle.search_prefix(length, rotated[members], k)
            for j, i in enumerate(members):
                found[i] = (
                    scores[j : j + 1, : live[i].query.k],
                    rows[j : j + 1, : live[i].query.k],
                )
        explained = [i for i, p in enumerate(live) if p.query.explain]
        codes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if explained:
            ids, values = self.coder.encode(np.stack([live[i].embedding for i in explained]))
            codes = {i: (ids[j], values[j]) for j, i in enumerate(explained)}
        for i, p in enumerate(live):
            scores, rows = found[i]
            p.result = self._result(p, scores[0], rows[0], codes.get(i))

    def _result(
        self,
        p: _Prepared,
        scores: np.ndarray,
        rows: np.ndarray,
        query_code: tuple[np.ndarray, np.ndarray] | None,
    ) -> SearchResult:
        keep = rows >= 0
        scores, rows = scores[keep], rows[keep]
        ids = self.bundle.ids(rows) if len(rows) else []
        fields = [f for f in p.query.metadata_fields if f != "id"]
        metadata = (
            self.bundle.metadata(rows).select(fields).to_pylist() if fields and len(rows) else []
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
        assert p.route is not None
        result = SearchResult(
            granularity=p.route.granularity,
            prefix_length=self.contract[p.route.granularity],
            routing_reason=p.route.reason,
            hits=hits,
            filtered_rows=None if p.allowed is None else p.allowed.count,
            bundle_version=self.bundle.version,
        )
        if query_code is not None:
            q_ids, q_values = query_code
            result.query_concepts = activations_of(self.coder, q_ids, q_values)
            item_ids, item_values = row_concepts(self.bundle, rows)
            for hit, ids_row, values_row in zip(hits, item_ids, item_values, strict=True):
                hit.concepts = activations_of(
                    self.coder, ids_row, values_row, self.config.hit_concepts
                )
                hit.shared_concepts = shared_concepts(
                    self.coder, q_ids, q_values, ids_row, values_row
                )
        return result

    # --- explanation ---

    def explain(
        self,
        query: SearchQuery,
        item_id: str | None = None,
        row: int | None = None,
    ) -> Explanation:
        """Shared concepts and per-prefix cosines of a query and one item (by id or row)."""
        if len(query.kinds) != 1:
            raise QueryError("give one query: a text, an image or a vector")
        self._check_query_input(query.text, query.image, query.vector)
        row = self.row_of(item_id, row)
        prepared = _Prepared(query)
        self._embed([prepared])
        if prepared.error is not None:
            raise prepared.error
        embedding = prepared.embedding[None, :]
        q_ids, q_values = (a[0] for a in self.coder.encode(embedding))
        item_ids, item_values = (a[0] for a in row_concepts(self.bundle, [row]))
        return Explanation(
            item_id=str(self.bundle.ids([row])[0]),
            row=row,
            similarities=prefix_similarities(self.bundle, self.bundle.rotate(embedding), row),
            shared_concepts=shared_concepts(self.coder, q_ids, q_values, item_ids, item_values),
            query_concepts=activations_of(self.coder, q_ids, q_values),
            item_concepts=activations_of(self.coder, item_ids, item_values),
            bundle_version=self.bundle.version,
        )

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

    def concept_info(self, entry: CatalogEntry) -> ConceptInfo:
        rows, _ = self.bundle.postings(entry.concept)
        return ConceptInfo(
            id=entry.concept,
            label=entry.label,
            name=entry.name,
            score=entry.score,
            runner_ups=list(entry.runner_ups),
            frequency=entry.frequency,
            examples=list(entry.examples),
            scope=entry.scope,
            active_rows=len(rows),
        )

    def list_concepts(
        self, name_contains: str = "", page_size: int = 0, page_token: str = ""
    ) -> ConceptPage:
        """A page of the catalog in id order; `page_token` is the previous page's
        `next_page_token` (an offset), `page_size` 0 means 100."""
        size = page_size or DEFAULT_PAGE
        if not 1 <= size <= MAX_PAGE:
            raise QueryError(f"page_size must lie in [1, {MAX_PAGE}], got {page_size}")
        check_chars("name_contains", name_contains, self.config.limits.lookup_chars)
        check_chars("a page token", page_token, self.config.limits.lookup_chars)
        needle = name_contains.strip().lower()
        matching = [e for e in self.coder.catalog if needle in e.name.lower()]
        start = _page_offset(page_token, len(matching))
        page = matching[start : start + size]
        following = start + len(page)
        return ConceptPage(
            concepts=[self.concept_info(e) for e in page],
            next_page_token=str(following) if following < len(matching) else "",
            total_size=len(matching),
        )

    def get_concept(self, ref: ConceptRef | str | int) -> list[ConceptInfo]:
        """Every concept a reference stands for (a name: all so named, best score first)."""
        ref = ConceptRef.parse(ref)
        for value in (ref.name, ref.label):
            if value is not None:
                check_chars("a concept reference", value, self.config.limits.lookup_chars)
        try:
            ids = resolve_ref(self.bundle, ref, "the catalog")
        except QueryError as exc:
            raise NotFoundError(str(exc)) from None
        entries = sorted((self.coder.catalog[c] for c in ids), key=lambda e: -e.score)
        return [self.concept_info(e) for e in entries]

    def info(self) -> IndexInfo:
        manifest = self.bundle.manifest
        return IndexInfo(
            bundle_version=manifest.version,
            bundle_name=manifest.name,
            created_at=manifest.created_at,
            rows=manifest.rows,
            dim=manifest.dim,
            k=manifest.k,
            encoder=manifest.encoder or "",
            modality=manifest.modality,
            prefixes=[
                PrefixInfo(
                    granularity=Granularity(p.granularity),
                    prefix_length=p.length,
                    factory=p.factory,
                    kind=p.kind,
                    on_disk=p.ondisk,
                    search_parameters=p.search,
                )
                for p in manifest.prefixes
            ],
            metadata_fields=list(self.metadata_fields),
            concepts=len(self.coder.catalog),
            image_queries=bool(self.encoder is not None and self.encoder.has_image_tower),
        )


def _page_offset(token: str, total: int) -> int:
    if not token:
        return 0
    if not token.isdigit() or int(token) > total:
        raise QueryError(f"invalid page token {echo(token)}")
    return int(token)
