"""The upgrade path end to end: a bundle built with MiniLM cut at layer 3 (model A), a cache of
the same scenes embedded by full MiniLM (model B), `strata upgrade`, and a server that embeds
queries with B and answers them from A's bundle."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pytest
from search_gallery import build_text_bundle
from typer.testing import CliRunner

from indexer.format.bundle import Bundle
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient
from service.api.server import ServerConfig
from service.cli import app
from service.engine.search import SearchEngine
from service.errors import ServiceError
from service.results import SearchQuery
from training.core.cache import EmbeddingCache
from training.core.encoders import load_encoder
from training.corpora.compositional import CompositionalCorpus
from training.cosae.upgrade import QueryTranslator
from training.embedding.job import EmbedConfig, embed_corpus

SCENES = 200


@pytest.fixture(scope="module")
def upgrade(tmp_path_factory: pytest.TempPathFactory, minilm) -> Path:
    """Folder with `bundles` (model A), `cache-b` (model B) and `translator` (procrustes)."""
    root = tmp_path_factory.mktemp("upgrade")
    old = load_encoder("minilm@layer:3", device="cpu", batch_size=32)
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        build_text_bundle(root, old, scenes=SCENES)
    finally:
        faiss.omp_set_num_threads(before)
    embed_corpus(
        CompositionalCorpus(scenes=SCENES, seed=3),  # the scenes of the bundle: the same ids
        minilm,
        root / "cache-b",
        EmbedConfig(dtype="float32", progress=False),
    )
    result = run(
        "upgrade",
        "--bundles",
        str(root / "bundles"),
        "--cache-b",
        str(root / "cache-b"),
        "--method",
        "procrustes",
        "--paired-fraction",
        "0.5",
        "--out",
        str(root / "translator"),
    )
    assert result.exit_code == 0, result.output
    assert "minilm (384-d) → minilm@layer:3 (384-d)" in result.output
    return root


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_translator_records_what_it_was_fitted_on(upgrade: Path):
    translator = QueryTranslator.load(upgrade / "translator")
    assert (translator.source_encoder, translator.target_encoder) == ("minilm", "minilm@layer:3")
    rows = EmbeddingCache.open(upgrade / "cache").rows
    paired = translator.info["paired"]
    assert paired["pairs"] == int(np.ceil(0.5 * rows)) and paired["shared_ids"] == rows
    # held-out pairs: translated B lands next to its own A row far above chance (1/held)
    assert translator.info["held_out"]["r1"] > 0.5


def test_server_answers_model_b_queries_from_model_a_bundle(upgrade: Path, minilm):
    engine = SearchEngine.open(upgrade / "bundles", device="cpu", translator=upgrade / "translator")
    assert engine.encoder is not None
    assert engine.encoder.id.startswith("minilm=>minilm@layer:3@")
    translator = QueryTranslator.load(upgrade / "translator")
    plain = SearchEngine(Bundle.open(upgrade / "bundles"), None)
    texts = ["a red car next to a tree", "a dog on the grass"]
    for text in texts:
        served = engine.search(SearchQuery(text=text, granularity="full", k=5))
        vector = translator.translate(minilm.encode_text([text]))[0]
        offline = plain.search(SearchQuery(vector=vector.tolist(), granularity="full", k=5))
        assert [h.id for h in served.hits] == [h.id for h in offline.hits]
    # and over gRPC: the same hits
    with (
        BackgroundServer(engine, ServerConfig(port=0)) as server,
        StrataClient(server.target, timeout=60) as client,
    ):
        answer = client.search(texts[0], granularity="full", k=5)
    expected = engine.search(SearchQuery(text=texts[0], granularity="full", k=5))
    assert [h.id for h in answer.hits] == [h.id for h in expected.hits]


def test_translated_captions_find_their_own_scene(upgrade: Path, minilm):
    """Each scene's caption, embedded by B and translated, finds that scene in A's bundle."""
    engine = SearchEngine.open(upgrade / "bundles", device="cpu", translator=upgrade / "translator")
    table = EmbeddingCache.open(upgrade / "cache-b").metadata()
    ids, captions = table.column("id").to_pylist(), table.column("caption").to_pylist()
    hits = [
        engine.search(SearchQuery(text=c, granularity="full", k=1)).hits[0].id == i
        for i, c in zip(ids[:40], captions[:40], strict=True)
    ]
    assert np.mean(hits) > 0.3  # chance: 1/200


def test_a_translator_for_another_model_is_refused(upgrade: Path, tmp_path: Path):
    translator = QueryTranslator.load(upgrade / "translator")
    translator.target_encoder = "open_clip:ViT-B-32@random:0"
    translator.save(tmp_path / "other")
    with pytest.raises(ServiceError, match="maps into open_clip"):
        SearchEngine.open(upgrade / "bundles", device="cpu", translator=tmp_path / "other")


def test_upgrade_refuses_bad_input(upgrade: Path, tmp_path: Path):
    bundles, cache_a = str(upgrade / "bundles"), str(upgrade / "cache")
    cases = [
        (["--cache-b", cache_a], "embedded by model A"),
        (["--cache-b", str(tmp_path / "none")], "not found"),
        (["--cache-b", str(upgrade / "cache-b"), "--method", "magic"], "unknown method"),
        (["--cache-b", str(upgrade / "cache-b"), "--paired-fraction", "2"], "fraction"),
        (
            ["--cache-b", str(upgrade / "cache-b"), "--cache-a", str(upgrade / "cache-b")],
            "but the bundle was built with",
        ),
    ]
    for extra, message in cases:
        result = run("upgrade", "--bundles", bundles, "--out", str(tmp_path / "t"), *extra)
        assert result.exit_code != 0
        assert message in str(result.exception), (extra, result.exception)
    result = run(
        "upgrade",
        "--bundles",
        bundles,
        "--cache-b",
        str(upgrade / "cache-b"),
        "--out",
        str(upgrade / "translator"),
        "--method",
        "procrustes",
    )
    assert "exists" in str(result.exception)
