"""The search engine: a loaded bundle and its encoder, with no network in sight.

`SearchEngine.search_batch(queries)` is the unit the server micro-batches:

1. validate each query (service/query/checks.py: one text, image or vector; top_k in
   [1, 1000]; a known granularity, concepts and metadata fields) — a bad query fails alone,
   with a `QueryError` naming it;
2. embed (service/query/embedding.py): every text of the batch in one `encode_text` call
   (with a query cache, only the distinct texts it does not hold: service/query/cache.py),
   every image in one `encode_image` call, each call timed into the caller's metrics;
   vectors are normalised; one GraSP rotation for the whole batch;
3. route each query to a prefix length: its granularity, or AUTO's choice (service/query/routing.py;
   image and vector queries go to the full vector);
4. restrict, plan and search: the engine's scorer (service/engine/scoring.py) — the bundle's
   own FAISS files (service/engine/local_scorer.py: plans, funnel, concept and metadata
   filters, grouping) or a Milvus collection (service/engine/milvus/scorer.py) — finds each query's
   rows and describes its hits: ids, requested metadata, and with `explain` the query's active
   concepts, each hit's strongest concepts and the concepts they share;
5. say how each filter reference was made (a learnt word concept, a zero-shot one — a word or
   phrase the catalog lacks is made from its text embedding on first use:
   service/engine/open_vocabulary.py — or CEDAR axes), and warn of every one whose concepts
   fall below the catalog's precision floor (service/engine/filtering.py's `filter_concepts`):
   the filter runs, the answer says so.

Catalog look-ups and the index's description are service/engine/catalog.py's. Scores are s_L, the
cosine of the first L rotated coordinates. Searches may run on several threads at once (the
server runs one per lane of its micro-batcher): the encoders embed concurrently, FAISS searches
take their parameters per call, the query cache is locked, and what the engine memoises (an
index opened, a prefix's exact rows) is the same whichever thread computes it first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from indexer.format.bundle import Bundle
from indexer.verify.check import check_servable
from service.engine.catalog import catalog_page, describe_index, find_concepts, zero_shot_info
from service.engine.compute_threads import engine_blas
from service.engine.descriptions import describe_pair
from service.engine.explain import (
    activations_of,
    prefix_similarities,
    query_words,
    shared_concepts,
    stored_embedding,
    version_gate,
    with_words,
)
from service.engine.filtering import filter_concepts, open_phrase
from service.engine.local_scorer import LocalScorer
from service.engine.open_vocabulary import OpenVocabulary
from service.engine.operating_points import check_min_recall, setting_for
from service.engine.scoring import EngineConfig, PreparedQuery, Scorer
from service.engine.thumbnails import recorded_image_root
from service.errors import (
    InternalError,
    QueryError,
    ServiceError,
    UnavailableError,
)
from service.limits import check_near_captions
from service.query.cache import QueryCache
from service.query.checks import (
    check_grouping,
    check_query,
    check_query_input,
    requested_granularity,
)
from service.query.embedding import EncoderObserver, bundle_encoder, embed_texts, encode
from service.query.routing import Route, route_text
from service.results import (
    ConceptInfo,
    ConceptPage,
    ConceptRef,
    Explanation,
    IndexInfo,
    Scope,
    SearchQuery,
    SearchResult,
)
from training.core.encoders import Encoder
from training.core.encoders.images import decode_image
from training.core.errors import InputError
from training.core.granularity import Granularity

__all__ = ["EngineConfig", "SearchEngine"]

log = logging.getLogger(__name__)


class SearchEngine:
    """Search, explanation and catalog look-ups over one loaded bundle version. `scorer`:
    where its rows are scored (None: the bundle's own FAISS files, a `LocalScorer`)."""

    def __init__(
        self,
        bundle: Bundle,
        encoder: Encoder | None,
        config: EngineConfig | None = None,
        cache: QueryCache | None = None,
        open_scorer: Callable[[OpenVocabulary | None], Scorer] | None = None,
        missing_encoder: str | None = None,
    ):
        engine_blas()  # numpy's BLAS on one thread, as a server runs it (compute_threads.py)
        self.bundle = bundle.load() if open_scorer is None else bundle
        self.encoder = encoder
        self.missing_encoder = missing_encoder  # why encoder is None, told to text/image queries
        self.config = config or EngineConfig()
        self.cache = cache  # text queries' embeddings (service/query/cache.py); None: no cache
        if encoder is not None and encoder.dim != bundle.dim:
            raise ServiceError(
                f"encoder {encoder.id} is {encoder.dim}-d, "
                f"but bundle {bundle.name} is {bundle.dim}-d"
            )
        self.coder = bundle.coder
        self.contract = bundle.contract
        self.image_root = self.config.image_root or recorded_image_root(bundle)
        self.vocabulary = (  # words and phrases the catalog lacks: open_vocabulary.py
            OpenVocabulary(self.bundle, self._embed_phrases)
            if encoder is not None and self.coder.readout is not None
            else None
        )
        # where the rows are scored, given the vocabulary the engine's encoder makes concepts of
        self.scorer: Scorer = (
            open_scorer(self.vocabulary)
            if open_scorer is not None
            else LocalScorer(self.bundle, self.config, self.image_root, self.vocabulary)
        )
        self.metadata = self.scorer.metadata
        self.metadata_fields = self.scorer.metadata_fields

    def with_bundle(self, bundle: Bundle) -> SearchEngine:
        """A new engine over `bundle` sharing this one's encoder, config and query cache (what
        a hot swap serves next)."""
        if self.scorer.follows_alias:
            raise ServiceError(
                "the Milvus backend follows its alias: publish a version with `strata index export`"
            )
        return SearchEngine(
            bundle, self.encoder, self.config, self.cache, missing_encoder=self.missing_encoder
        )

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
        """The published version of a bundle directory, with the encoder its manifest names
        (one this machine cannot load: vector queries only, `bundle_encoder`).

        The version is verified first (`indexer.verify.check.check_servable`; `VersionRefusedError`
        naming the file when it fails) unless `verify` is False. With `translator` (a folder
        written by `strata upgrade`), queries are embedded by the translator's source model and
        translated into the bundle's space instead.
        """
        bundle = Bundle.open(bundles)
        if verify:
            check_servable(bundle.path)
        spec = bundle.manifest.encoder
        encoder: Encoder | None
        missing = None
        if translator is not None:
            from service.query.translation import translated_encoder

            if not spec:
                raise ServiceError(f"bundle {bundle.path} records no encoder to translate into")
            encoder = translated_encoder(translator, spec, bundle.dim, device, batch_size)
        else:
            encoder, missing = bundle_encoder(spec, device, batch_size)
        log.info(
            "bundle %s: %d rows, encoder %s on %s",
            bundle.name,
            bundle.rows,
            encoder.id if encoder else spec,
            encoder.device if encoder else "none (vector queries only)",
        )
        return cls(bundle, encoder, config, cache, missing_encoder=missing)

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
            head = max(p.length for p in live)
            embedded = (
                live[0].embedding[None, :]
                if len(live) == 1
                else np.stack([p.embedding for p in live])
            )
            rotated = self.bundle.grasp.apply(embedded, head)
            try:
                self.scorer.search(live, rotated)
            except UnavailableError as exc:  # the scorer's store did not answer: the batch fails
                log.warning("%s", exc)
                return [UnavailableError(str(exc)) for _ in queries]
        for p in prepared:
            if p.result is not None:
                p.result.warnings = list(p.warnings)
                p.result.filter_concepts = list(p.filter_concepts)
        return [p.error if p.error is not None else p.result for p in prepared]  # type: ignore[misc]

    def _prepare(self, query: SearchQuery) -> PreparedQuery:
        prepared = PreparedQuery(query)
        try:
            prepared.embedding = check_query(  # a vector query's unit vector
                query,
                self.config.limits,
                self.metadata_fields,
                self.bundle.dim,
                self.encoder,
                self.missing_encoder,
            )
            prepared.route = self.route(query)
            prepared.length = self.contract[prepared.route.granularity]
            check_min_recall(query.min_recall)
            prepared.setting = setting_for(
                self.bundle.manifest.prefix(prepared.length), query.min_recall
            )
            check_grouping(query, self.config.limits)
            if query.group_by:
                self.metadata.check_field(query.group_by, "group_by")
            self.scorer.restrict(prepared)
            if query.require or query.exclude:
                prepared.filter_concepts, prepared.warnings = filter_concepts(
                    self.bundle, query.require, query.exclude, query.scope, self.vocabulary
                )
        except ServiceError as exc:
            prepared.error = exc
        except Exception as exc:  # a bug fails its own query (INTERNAL), not its whole batch
            log.exception("preparing a query failed")
            prepared.error = InternalError(f"internal error: {exc!r}")
        return prepared

    def _embed(self, prepared: list[PreparedQuery], observer: EncoderObserver | None) -> None:
        """Unit embeddings for every live query: one encoder call per modality (timed into
        `observer`: service/query/embedding.py)."""
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

    def _embed_phrases(self, phrases: list[str]) -> np.ndarray:
        assert self.encoder is not None
        return np.stack(embed_texts(self.encoder, self.cache, phrases, None))

    def route(self, query: SearchQuery) -> Route:
        """Where a query goes: its granularity, or AUTO's choice (text: by rule; else full)."""
        granularity = requested_granularity(query.granularity)
        if granularity is not None:
            return Route(granularity, "requested")
        if query.text is not None:
            return route_text(query.text)
        kind = "image" if query.image is not None else "vector"
        return Route(Granularity.FULL, f"auto on a{'n' if kind == 'image' else ''} {kind} query")

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
        description of each one's code (service/engine/descriptions.py) with `near_captions`
        nearest captions (0: the phrases only, no search); the encoder call timed into
        `observer`. The item is read back by the scorer; word concepts take part where its
        store keeps the item's."""
        self.check_explain(query, near_captions)
        item = self.scorer.stored_row(item_id, row)
        embedding, q_axis_ids, q_axis_values = self.explained_query(query, observer)
        q_code = (q_axis_ids, q_axis_values)
        item_code = item.axes
        if item.words is not None:
            q_code = with_words(query_words(self.bundle, embedding)[0], q_code)
            item_code = with_words(item.words, item.axes)
        vectors = (embedding[0], stored_embedding(self.bundle, item.prefixes[self.bundle.dim]))
        query_description, item_description = describe_pair(
            self.bundle,
            self.coder,
            (q_code, item_code),
            item.row,
            near_captions,
            self.scorer.nearest_rows,
            [None, None]
            if (gate := version_gate(self.bundle)) is None
            else [gate.judge(v) for v in vectors],
        )
        rotated = self.bundle.rotate(embedding)
        return Explanation(
            item_id=item.item_id,
            row=item.row,
            similarities=prefix_similarities(self.contract, rotated, item.prefixes),
            shared_concepts=shared_concepts(self.coder, *q_code, *item_code),
            query_concepts=activations_of(self.coder, *q_code),
            item_concepts=activations_of(self.coder, *item_code),
            bundle_version=self.bundle.version,
            query_description=query_description,
            item_description=item_description,
        )

    def check_explain(self, query: SearchQuery, near_captions: int) -> None:
        """QueryError unless the query is one valid text, image or vector and near_captions
        lies within the limit."""
        if len(query.kinds) != 1:
            raise QueryError("give one query: a text, an image or a vector")
        check_query_input(
            query, self.config.limits, self.bundle.dim, self.encoder, self.missing_encoder
        )
        check_near_captions(near_captions, self.config.limits)

    def explained_query(
        self, query: SearchQuery, observer: EncoderObserver | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The query embedded ([1, D]) and its code: (embedding, concept ids, activations)."""
        prepared = PreparedQuery(query)
        self._embed([prepared], observer)
        if prepared.error is not None:
            raise prepared.error
        embedding = prepared.embedding[None, :]
        q_ids, q_values = (a[0] for a in self.coder.encode(embedding))
        return embedding, q_ids, q_values

    # --- the catalog ---

    def list_concepts(
        self,
        name_contains: str = "",
        page_size: int = 0,
        page_token: str = "",
        include_below_floor: bool = False,
    ) -> ConceptPage:
        """A page of the catalog (`service.engine.catalog.catalog_page`)."""
        return catalog_page(
            self.bundle,
            name_contains,
            page_size,
            page_token,
            self.config.limits,
            include_below_floor,
        )

    def get_concept(self, ref: ConceptRef | str | int) -> list[ConceptInfo]:
        """Every concept a reference stands for (`service.engine.catalog.find_concepts`); a
        word or phrase the catalog lacks (or holds as zero-shot words only), its zero-shot
        concept on this gallery (made now, or kept: service/engine/open_vocabulary.py)."""
        phrase = open_phrase(self.bundle, ConceptRef.parse(ref), Scope.ANY, self.vocabulary)
        if phrase is not None and self.vocabulary is not None:
            return [zero_shot_info(self.bundle, self.vocabulary.concept(phrase))]
        return find_concepts(self.bundle, ref, self.config.limits)

    def info(self) -> IndexInfo:
        return describe_index(self.bundle, self.metadata.schema, self.encoder)
