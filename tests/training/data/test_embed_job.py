"""The embed job: corpus + encoder -> cache; resumable, atomic, honest about what it skipped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from waiting import wait_for

from training.core.cache import EmbeddingCache
from training.core.config import build_config
from training.core.errors import CacheError, InputError
from training.corpora import CompositionalCorpus, Record, open_corpus
from training.embedding.job import EmbedConfig, embed_corpus

QUIET = {"progress": False}


class FailingCorpus(CompositionalCorpus):
    """The compositional corpus, except that reading dies after `fail_after` records."""

    def __init__(self, fail_after: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fail_after = fail_after

    def records(self) -> Iterator[Record]:
        for count, record in enumerate(super().records()):
            if count == self.fail_after:
                raise RuntimeError("simulated crash")
            yield record


def test_round_trip(tiny_clip, tmp_path: Path):
    corpus = CompositionalCorpus(scenes=250, seed=2)
    summary = embed_corpus(
        corpus, tiny_clip, tmp_path, EmbedConfig(shard_rows=100, dtype="float32", **QUIET)
    )
    assert (summary.rows, summary.shards_written, summary.shards_resumed) == (250, 3, 0)
    cache = EmbeddingCache.open(tmp_path)
    assert cache.manifest.encoder == tiny_clip.id and cache.dim == 32
    assert cache.manifest.encoder_provenance["kind"] == "random"
    assert [s.rows for s in cache.manifest.shards] == [100, 100, 50]
    texts = [r.text for r in corpus]
    np.testing.assert_allclose(cache.embeddings("text"), tiny_clip.encode_text(texts), atol=1e-6)
    metadata = cache.metadata()
    assert metadata.column("id").to_pylist() == [r.id for r in corpus]
    assert metadata.column("neg_order")[7].as_py() == list(corpus)[7].fields["neg_order"]
    assert cache.verify() == []


def test_float16_and_rerun_of_a_complete_cache(tiny_clip, tmp_path: Path):
    corpus = CompositionalCorpus(scenes=40)
    embed_corpus(corpus, tiny_clip, tmp_path, EmbedConfig(**QUIET))
    cache = EmbeddingCache.open(tmp_path)
    assert cache.manifest.dtype == "float16"
    np.testing.assert_allclose(np.linalg.norm(cache.embeddings("text"), axis=1), 1.0, atol=2e-3)
    again = embed_corpus(corpus, tiny_clip, tmp_path, EmbedConfig(**QUIET))
    assert again.already_complete and again.rows == 40 and again.rows_written == 0


def test_resume_after_a_crash_equals_an_uninterrupted_run(tiny_clip, tmp_path: Path):
    config = EmbedConfig(shard_rows=60, dtype="float32", **QUIET)
    with pytest.raises(RuntimeError, match="simulated crash"):
        embed_corpus(FailingCorpus(fail_after=150, scenes=300), tiny_clip, tmp_path / "a", config)
    partial = EmbeddingCache.open(tmp_path / "a", allow_incomplete=True)
    assert not partial.manifest.complete and partial.rows == 120  # two whole shards, not 150

    resumed = embed_corpus(CompositionalCorpus(scenes=300), tiny_clip, tmp_path / "a", config)
    assert (resumed.shards_resumed, resumed.shards_written, resumed.rows_written) == (2, 3, 180)
    fresh = embed_corpus(CompositionalCorpus(scenes=300), tiny_clip, tmp_path / "b", config)
    assert fresh.rows == resumed.rows == 300
    a, b = EmbeddingCache.open(tmp_path / "a"), EmbeddingCache.open(tmp_path / "b")
    np.testing.assert_array_equal(a.embeddings("text"), b.embeddings("text"))
    assert a.metadata().equals(b.metadata())


def test_a_different_job_is_refused_unless_overwritten(tiny_clip, tmp_path: Path):
    embed_corpus(CompositionalCorpus(scenes=30), tiny_clip, tmp_path, EmbedConfig(**QUIET))
    with pytest.raises(CacheError, match="differs in corpus"):
        embed_corpus(CompositionalCorpus(scenes=31), tiny_clip, tmp_path, EmbedConfig(**QUIET))
    with pytest.raises(CacheError, match="differs in dtype"):
        embed_corpus(
            CompositionalCorpus(scenes=30),
            tiny_clip,
            tmp_path,
            EmbedConfig(dtype="float32", **QUIET),
        )
    summary = embed_corpus(
        CompositionalCorpus(scenes=31), tiny_clip, tmp_path, EmbedConfig(overwrite=True, **QUIET)
    )
    assert summary.rows == 31 and EmbeddingCache.open(tmp_path).rows == 31


def test_refuses_a_folder_that_is_not_a_cache(tiny_clip, tmp_path: Path):
    (tmp_path / "precious.txt").write_text("do not delete")
    with pytest.raises(CacheError, match="not a Strata cache"):
        embed_corpus(CompositionalCorpus(scenes=5), tiny_clip, tmp_path, EmbedConfig(**QUIET))


def test_bad_config():
    with pytest.raises(ValidationError, match="dtype"):
        EmbedConfig(dtype="int8")
    with pytest.raises(ValidationError, match="shard_rows"):
        EmbedConfig(shard_rows=0)
    with pytest.raises(ValidationError, match="modalities"):
        EmbedConfig(modalities=("audio",))
    with pytest.raises(ValidationError, match="modalities"):
        EmbedConfig(modalities=())
    with pytest.raises(InputError, match="strata embed: shard_rows"):
        build_config(EmbedConfig, {"shard_rows": 0}, "strata embed")
    with pytest.raises(InputError, match=r"^strata embed: dtype: dtype must be one of float16"):
        build_config(EmbedConfig, {"dtype": "int8"}, "strata embed")


def test_images_with_captions_share_one_vector_per_image(tiny_clip, tmp_path: Path, write_png):
    root = tmp_path / "coco"
    write_png(root / "images" / "red.jpg", (250, 0, 0))
    write_png(root / "images" / "green.jpg", (0, 250, 0))
    (root / "images" / "broken.jpg").write_bytes(b"\xff\xd8\xff not really a jpeg")
    data = {
        "images": [
            {"id": i, "file_name": f} for i, f in enumerate(["red.jpg", "green.jpg", "broken.jpg"])
        ],
        "annotations": [
            {"id": 1, "image_id": 0, "caption": "a red square"},
            {"id": 2, "image_id": 0, "caption": "something red"},
            {"id": 3, "image_id": 1, "caption": "a green square"},
            {"id": 4, "image_id": 2, "caption": "a broken file"},
        ],
    }
    (root / "captions.json").write_text(json.dumps(data))
    summary = embed_corpus(
        open_corpus("coco", root), tiny_clip, tmp_path / "cache", EmbedConfig(**QUIET)
    )
    assert (summary.rows, summary.records_unusable) == (3, 1)
    cache = EmbeddingCache.open(tmp_path / "cache")
    assert cache.modalities == ["text", "image"]
    ids = cache.metadata().column("id").to_pylist()
    assert ids == ["3", "1", "2"]  # captions ordered by image file name: green, red, red
    images = dict(zip(ids, cache.embeddings("image"), strict=True))
    np.testing.assert_array_equal(images["1"], images["2"])
    expected = tiny_clip.encode_image([root / "images" / "red.jpg", root / "images" / "green.jpg"])
    np.testing.assert_allclose(images["1"], expected[0], atol=2e-3)
    np.testing.assert_allclose(images["3"], expected[1], atol=2e-3)
    assert not np.allclose(images["1"], images["3"], atol=1e-2)


def test_text_only_encoder_on_captioned_images(minilm, tmp_path: Path, write_png):
    write_png(tmp_path / "pic.png", (1, 2, 3))
    texts = tmp_path / "t.jsonl"
    texts.write_text('{"id": "1", "text": "a picture", "image_path": "pic.png"}\n')
    embed_corpus(open_corpus("texts", texts), minilm, tmp_path / "c", EmbedConfig(**QUIET))
    assert EmbeddingCache.open(tmp_path / "c").modalities == ["text"]
    with pytest.raises(InputError, match="no image tower"):
        config = EmbedConfig(modalities=("image",), **QUIET)
        embed_corpus(open_corpus("texts", texts), minilm, tmp_path / "d", config)


def listed_shards(cache: Path) -> int:
    try:
        return len(json.loads((cache / "manifest.json").read_text())["shards"])
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


@pytest.mark.slow
def test_resume_after_the_process_is_killed(tiny_clip_config: Path, tmp_path: Path):
    """A real `strata embed run` is SIGKILLed mid-shard, then rerun with the same command.

    The corpus is read from a named pipe that the test feeds, so the job is stopped at a known
    place: after two whole shards, with part of the third read but never written.
    """
    lines = [
        json.dumps({"id": f"t{i}", "text": f"caption number {i} of a long list"})
        for i in range(500)
    ]
    corpus, cache = tmp_path / "texts.jsonl", tmp_path / "cache"
    os.mkfifo(corpus)
    command = [
        sys.executable,
        "-m",
        "service",
        "embed",
        "run",
        "--corpus",
        "texts",
        "--path",
        str(corpus),
        "--encoder",
        f"open_clip:{tiny_clip_config}",
        "--modalities",
        "text",
        "--dtype",
        "float32",
        "--shard-rows",
        "100",
        "--out",
        str(cache),
        "--no-progress",
    ]
    env = {**os.environ, "STRATA_LOG_LEVEL": "WARNING"}
    job = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        with corpus.open("w") as feed:  # blocks until the job opens the pipe
            feed.write("\n".join(lines[:250]) + "\n")
            feed.flush()
            wait_for(lambda: listed_shards(cache) == 2 or job.poll() is not None, 120, "two shards")
            job.send_signal(signal.SIGKILL)
            job.wait(timeout=30)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == -signal.SIGKILL, job.stderr.read()
    assert listed_shards(cache) == 2
    assert not EmbeddingCache.open(cache, allow_incomplete=True).manifest.complete
    (cache / "text_emb" / "text_emb_00002.npy").write_bytes(b"half a shard from elsewhere")

    corpus.unlink()
    corpus.write_text("\n".join(lines) + "\n")
    rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert "2 shards resumed, 3 written" in rerun.stdout and "cleaned      1 files" in rerun.stdout
    resumed = EmbeddingCache.open(cache)
    assert resumed.rows == 500 and resumed.verify() == []
    assert resumed.metadata().column("id").to_pylist() == [f"t{i}" for i in range(500)]

    from training.core.encoders import load_encoder

    encoder = load_encoder(f"open_clip:{tiny_clip_config}", device="cpu")
    expected = encoder.encode_text([json.loads(line)["text"] for line in lines])
    np.testing.assert_allclose(resumed.embeddings("text"), expected, atol=1e-5)


def test_output_path_that_is_a_file(tiny_clip, tmp_path: Path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(CacheError, match="is a file"):
        embed_corpus(CompositionalCorpus(scenes=5), tiny_clip, target, EmbedConfig(**QUIET))
