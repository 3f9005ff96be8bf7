"""The engine tests' Milvus Lite server and the Milvus engines over the session's bundles
(two_engines.py: one contract, two engines), one server per module, as test_milvus_backend
keeps its own: a session-long in-process server stopped taking connections late in a full
run (pymilvus: "Fail connecting to server")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from two_engines import LiteServer, exported_engine

from service.engine.search import SearchEngine


@pytest.fixture(scope="module")
def shared_lite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiteServer]:
    """The Milvus Lite server a module's two-engine tests export to."""
    running = LiteServer(tmp_path_factory.mktemp("milvus-shared") / "lite.db")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def milvus_text_engine(shared_lite: LiteServer, text_bundle: Path, minilm) -> SearchEngine:
    return exported_engine(shared_lite, text_bundle, "text", minilm)


@pytest.fixture(scope="module")
def milvus_word_engine(shared_lite: LiteServer, word_bundle: Path, minilm) -> SearchEngine:
    return exported_engine(shared_lite, word_bundle, "words", minilm)
