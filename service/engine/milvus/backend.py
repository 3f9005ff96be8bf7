"""The search engine over Milvus: `open_milvus` opens the version an alias names (`strata serve
--backend …`), `milvus_engine` builds the engine over one exported collection, `following` the
engine over the collection the alias names next (service/serving/alias_follower.py swaps it in).
Each is a `SearchEngine` whose scorer is a `MilvusScorer` (service/engine/milvus/scorer.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from indexer.format.bundle import Bundle
from indexer.milvus.store import DEFAULT_NAME, ExportError, MilvusStore
from service.engine.milvus.scorer import MilvusScorer
from service.engine.scoring import EngineConfig
from service.engine.search import SearchEngine
from service.errors import ServiceError
from service.query.cache import QueryCache
from service.query.embedding import bundle_encoder
from training.core.encoders import Encoder


def open_milvus(
    target: str,
    bundles: str | Path,
    name: str = DEFAULT_NAME,
    device: str = "auto",
    batch_size: int = 128,
    config: EngineConfig | None = None,
    cache: QueryCache | None = None,
    timeout_s: float = 5.0,
    encoder: Encoder | None = None,
) -> SearchEngine:
    """The engine over the version the alias `name` names at `target`, its manifest and
    artifacts read from the bundle directory `bundles`, with the encoder its manifest names (none
    loadable here: vector queries only)."""
    store = MilvusStore(target, timeout_s)
    collection = store.current(name)
    if collection is None:
        raise ExportError(
            f"no alias {name!r} at {target}: run `strata index export --to {target}` first"
        )
    bundle = Bundle.open_version(Path(bundles).expanduser() / store.record(collection).bundle)
    missing = None
    if encoder is None:
        encoder, missing = bundle_encoder(bundle.manifest.encoder, device, batch_size)
    return milvus_engine(
        bundle, encoder, store, collection, config, cache, name, missing_encoder=missing
    )


def milvus_engine(
    bundle: Bundle,
    encoder: Encoder | None,
    store: MilvusStore,
    collection: str,
    config: EngineConfig | None = None,
    cache: QueryCache | None = None,
    name: str = DEFAULT_NAME,
    ef: int | None = None,
    missing_encoder: str | None = None,
) -> SearchEngine:
    """A `SearchEngine` whose rows are the collection `collection` of alias `name`, exported
    from `bundle` (ExportError when it holds another version). `ef`: an HNSW field's search
    breadth where the request's setting names none."""
    config = config or EngineConfig()
    return SearchEngine(
        bundle,
        encoder,
        config,
        cache,
        lambda vocabulary: MilvusScorer(bundle, store, collection, config, name, ef, vocabulary),
        missing_encoder,
    )


def following(engine: SearchEngine, collection: str) -> SearchEngine:
    """The engine over another collection of a Milvus engine's alias (its version's folder next
    to the served one), sharing encoder, config, cache and connection."""
    if not engine.scorer.follows_alias:
        raise ServiceError("the alias follower needs a Milvus-backed engine")
    scorer = cast(MilvusScorer, engine.scorer)  # the one scorer that follows an alias
    store = scorer.store
    bundle = Bundle.open_version(engine.bundle.path.parent / store.record(collection).bundle)
    return milvus_engine(
        bundle,
        engine.encoder,
        store,
        collection,
        engine.config,
        engine.cache,
        scorer.name,
        scorer.ef,
        engine.missing_encoder,
    )
