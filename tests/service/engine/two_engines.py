"""One contract, two engines: the request-level engine tests run against the local scorer
(FAISS files) and the Milvus scorer (the same bundle exported to a real Milvus Lite server), by
overriding their engine fixture with `either` (params ENGINES; the fixtures: conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from milvus_lite.adapter.grpc.server import start_server_in_thread

from indexer.format.bundle import Bundle
from indexer.milvus.export import export_bundle
from indexer.milvus.store import MilvusStore
from service.engine.milvus.backend import milvus_engine, open_milvus
from service.engine.milvus.scorer import MilvusScorer
from service.engine.search import EngineConfig, SearchEngine
from tests.servers import free_port

ENGINES = ("local", "milvus")


class LiteServer:
    """A Milvus Lite gRPC server on a fixed port, stopped and started again at will."""

    def __init__(self, data: Path) -> None:
        self.data, self.port = data, free_port()
        self.server = self.db = None
        self.start()

    @property
    def uri(self) -> str:
        return f"milvus://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.server, self.db, _ = start_server_in_thread(str(self.data), port=self.port)

    def stop(self) -> None:
        self.server.stop(grace=0)
        self.db.close()


def exported_engine(lite: LiteServer, bundles: Path, alias: str, encoder) -> SearchEngine:
    """The engine over `bundles` exported to `lite` under `alias`, as `strata serve --backend`
    opens it."""
    store = MilvusStore(lite.uri, timeout_s=30)
    try:
        export_bundle(Bundle.open(bundles), store, alias, rows_per_batch=150)
    finally:
        store.close()
    return open_milvus(lite.uri, bundles, alias, encoder=encoder, timeout_s=10)


def either(request: pytest.FixtureRequest, local: SearchEngine, milvus: str) -> SearchEngine:
    """The local engine, or (param "milvus") the fixture `milvus` over the same bundle."""
    return local if request.param == "local" else request.getfixturevalue(milvus)


def configured(engine: SearchEngine, config: EngineConfig) -> SearchEngine:
    """An engine like `engine` (same bundle, encoder and scorer kind) with another config."""
    scorer = engine.scorer
    if isinstance(scorer, MilvusScorer):
        return milvus_engine(
            engine.bundle,
            engine.encoder,
            scorer.store,
            scorer.collection,
            config,
            None,
            scorer.name,
        )
    return SearchEngine(engine.bundle, engine.encoder, config)
