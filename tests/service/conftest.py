"""The service's fixtures: one real MiniLM bundle, its engine, and a live gRPC server on it."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import faiss
import pytest
import redis
from search_gallery import MANY_WORDS, STATED_WORDS, WORD_FLOOR, build_text_bundle
from serving_helpers import REDIS_URL

from indexer.format.bundle import Bundle
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.serving.batching import BatchingConfig


@pytest.fixture
def prefix() -> Iterator[str]:
    """A Redis key prefix of this test's own; every key under it is deleted afterwards."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.exceptions.ConnectionError as exc:
        pytest.fail(
            f"no Redis at {REDIS_URL}: {exc}; these tests need a Redis at 127.0.0.1:6379 "
            "(.ci/run starts one)"
        )
    name = f"strata-test-{uuid.uuid4().hex[:12]}"
    yield name
    keys = list(client.scan_iter(f"{name}:*"))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture(scope="session")
def word_bundle(tmp_path_factory: pytest.TempPathFactory, minilm) -> Path:
    """BUNDLES folder: the text bundle's scenes, its CEDAR artifact with the one-word readout
    of search_gallery.beacon_readout (word concept BEACON) and precision floor WORD_FLOOR."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return build_text_bundle(
            tmp_path_factory.mktemp("word-bundle"), minilm, words=True, floor=WORD_FLOOR
        )
    finally:
        faiss.omp_set_num_threads(before)


@pytest.fixture(scope="session")
def stated_bundle(tmp_path_factory: pytest.TempPathFactory, minilm) -> Path:
    """BUNDLES folder: the word bundle's scenes, its readout of BEACON and STATED_WORDS more
    words keeping their text directions, so that its build measured the open vocabulary's
    state (indexer/vocabulary/stored_state.py)."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return build_text_bundle(
            tmp_path_factory.mktemp("stated-bundle"),
            minilm,
            words=True,
            floor=WORD_FLOOR,
            extra_words=STATED_WORDS,
            text=True,
        )
    finally:
        faiss.omp_set_num_threads(before)


@pytest.fixture(scope="session")
def text_bundle(tmp_path_factory: pytest.TempPathFactory, minilm) -> Path:
    """BUNDLES folder: 300 compositional scenes, MiniLM (384-d: prefixes 24/48/96/192/384)."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return build_text_bundle(tmp_path_factory.mktemp("text-bundle"), minilm)
    finally:
        faiss.omp_set_num_threads(before)


@pytest.fixture(scope="session")
def engine(text_bundle: Path, minilm) -> SearchEngine:
    """The engine over the text bundle, sharing the session's MiniLM."""
    return SearchEngine(Bundle.open(text_bundle), minilm)


@pytest.fixture(scope="session")
def server(engine: SearchEngine) -> Iterator[BackgroundServer]:
    """A live grpc.aio server on a free local port (port 0, the bound port read back)."""
    config = ServerConfig(port=0, batching=BatchingConfig(max_batch=16, max_wait_ms=5))
    with BackgroundServer(engine, config) as running:
        yield running


@pytest.fixture(scope="session")
def client(server: BackgroundServer) -> Iterator[StrataClient]:
    with StrataClient(server.target, timeout=60) as connected:
        yield connected


@pytest.fixture
def strata_in_process(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., tuple[int, str, str]]:
    """`strata ARGS` through service.cli.main in this process: (exit code, stdout, stderr)."""
    from service.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", ["strata", *args])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture(scope="session")
def many_words_bundle(tmp_path_factory: pytest.TempPathFactory, minilm) -> Path:
    """BUNDLES folder: the word bundle's scenes with 1 + MANY_WORDS readout words active on
    the first row's neighbours (search_gallery.beacon_readout), so a row holds more concepts
    than CEDAR's k (and than 32)."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return build_text_bundle(
            tmp_path_factory.mktemp("many-words-bundle"),
            minilm,
            words=True,
            floor=WORD_FLOOR,
            extra_words=MANY_WORDS,
        )
    finally:
        faiss.omp_set_num_threads(before)
