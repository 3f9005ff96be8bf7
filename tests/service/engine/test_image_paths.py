"""Portable image paths: the embed job stores them relative to the corpus root (and the root in
the cache manifest); the engine resolves them against `--image-root` or the recorded root; an
absolute path, as older caches hold, is returned as stored."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from search_gallery import build_image_bundle

from indexer.format.bundle import Bundle
from service.engine.hits import resolve_image_path
from service.engine.search import EngineConfig, SearchEngine
from service.results import SearchQuery
from training.core.cache import EmbeddingCache
from training.embedding.job import stored_image_path


@pytest.fixture(scope="module")
def image_bundle(tmp_path_factory: pytest.TempPathFactory, tiny_clip) -> Path:
    from PIL import Image

    def write_png(path: Path, colour, size=(40, 30)) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", size, colour).save(path)
        return path

    return build_image_bundle(tmp_path_factory.mktemp("gallery"), tiny_clip, write_png, 1)


def image_paths(engine: SearchEngine) -> list[str]:
    vector = np.random.default_rng(0).normal(size=engine.bundle.dim)
    result = engine.search(SearchQuery.of(vector=vector, k=6, metadata_fields=["image_path"]))
    return [h.metadata["image_path"] for h in result.hits]


def test_the_cache_stores_paths_relative_to_the_corpus_root(image_bundle: Path):
    root = image_bundle.parent  # the JSONL listing's folder: its image paths are relative to it
    cache = EmbeddingCache.open(root / "cache")
    assert cache.manifest.image_root == str(root.resolve())
    stored = pq.read_table(root / "cache" / cache.manifest.shards[0].path("metadata"))
    assert sorted(stored.column("image_path").to_pylist())[0] == "images/blue-0.png"
    assert Bundle.open(image_bundle).manifest.source["image_root"] == str(root.resolve())


def test_hits_resolve_them_against_the_recorded_root_or_the_one_given(
    image_bundle: Path, tiny_clip, tmp_path: Path
):
    recorded = image_paths(SearchEngine(Bundle.open(image_bundle), tiny_clip))
    root = image_bundle.parent.resolve()
    assert all(p.startswith(f"{root}/images/") and Path(p).is_file() for p in recorded)
    moved = tmp_path / "elsewhere"
    shutil.copytree(image_bundle.parent / "images", moved / "images")
    config = EngineConfig(image_root=moved)
    served = image_paths(SearchEngine(Bundle.open(image_bundle), tiny_clip, config))
    assert [Path(p).relative_to(moved) for p in served] == [
        Path(p).relative_to(root) for p in recorded
    ]
    assert all(Path(p).is_file() for p in served)


def test_absolute_paths_of_older_caches_are_kept(tmp_path: Path):
    old = str(tmp_path / "photos" / "a.png")
    assert resolve_image_path(old, Path("/elsewhere")) == old
    assert resolve_image_path("photos/a.png", Path("/data")) == "/data/photos/a.png"
    assert resolve_image_path("photos/a.png", None) == "photos/a.png"  # no root anywhere
    assert stored_image_path(old, tmp_path) == "photos/a.png"
    assert stored_image_path(old, tmp_path / "other") == old  # outside the root: as given
    assert stored_image_path(old, None) == old


def test_serve_refuses_an_image_root_that_is_no_folder(tmp_path: Path, capsys, monkeypatch):
    from service.cli import main

    argv = ["strata", "serve", "--bundles", str(tmp_path), "--image-root", str(tmp_path / "no")]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exited:
        main()
    err = capsys.readouterr().err.strip()
    assert (
        exited.value.code == 2
        and err == f"strata: error: --image-root is not a folder: {tmp_path / 'no'}"
    )
