"""A bundle whose encoder this machine cannot load (here 'synthetic', as an imported cache's
may be) starts and serves vector queries; a text or image query is FAILED_PRECONDITION over
gRPC (HTTP 400 with that status) naming the missing encoder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from http_helpers import call

from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient, StrataClientError
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.errors import EncoderUnavailableError
from service.results import SearchQuery
from training.core.cache import EmbeddingCache
from training.synthetic import (
    random_cedar_artifact,
    random_grasp_artifact,
    write_synthetic_cache,
)

DIM = 64


@pytest.fixture(scope="module")
def synthetic_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vector-only")
    cache = write_synthetic_cache(root / "cache", 300, DIM, clusters=8, seed=1)
    random_grasp_artifact(DIM, 1).save(root / "grasp")
    sample = EmbeddingCache.open(cache).embeddings("image")
    random_cedar_artifact(DIM, 4, sample, seed=2).save(root / "cedar")
    config = BuildConfig(
        cache=cache, grasp=root / "grasp", cedar=root / "cedar", out=root / "b", progress=False
    )
    build_bundle(config)
    return root / "b"


@pytest.fixture(scope="module")
def served(synthetic_bundle: Path) -> Iterator[BackgroundServer]:
    engine = SearchEngine.open(synthetic_bundle, device="cpu")
    with BackgroundServer(engine, ServerConfig(port=0, http_port=0)) as running:
        yield running


def test_the_engine_opens_without_its_encoder(synthetic_bundle: Path):
    engine = SearchEngine.open(synthetic_bundle, device="cpu")
    assert engine.encoder is None and "'synthetic'" in (engine.missing_encoder or "")
    vector = np.ones(DIM, dtype=np.float32).tolist()
    assert len(engine.search(SearchQuery.of(vector=vector, k=3)).hits) == 3
    with pytest.raises(EncoderUnavailableError, match="encoder 'synthetic'"):
        engine.search(SearchQuery.of("a dog", k=3))


def test_vector_queries_served_text_and_image_refused(
    served: BackgroundServer, write_png, tmp_path: Path
):
    vector = np.ones(DIM).tolist()
    photo = write_png(tmp_path / "photo.png", (200, 40, 40))
    with StrataClient(served.target) as client:
        assert len(client.search(vector=vector, k=4).hits) == 4
        for query in ({"text": "a dog"}, {"image": str(photo)}):
            with pytest.raises(StrataClientError) as refused:
                client.search(query.get("text"), image=query.get("image"), k=4)
            assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
            assert "encoder 'synthetic'" in refused.value.details
            assert "vector queries only" in refused.value.details
    base = f"http://{served.server.http_address}"
    status, answer = call(base, "/v1/search", {"query": {"text": "a dog"}, "topK": 3})
    assert status == 400 and answer["error"]["status"] == "FAILED_PRECONDITION"
    assert "encoder 'synthetic'" in answer["error"]["message"]
    status, answer = call(base, "/v1/search", {"query": {"vector": {"values": vector}}, "topK": 3})
    assert status == 200 and len(answer["hits"]) == 3, answer
