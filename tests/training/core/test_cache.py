"""The embedding-cache format: round trip, verification, and caches written by clip-retrieval."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from training.core.cache import (
    CacheManifest,
    EmbeddingCache,
    remove_unlisted_files,
    write_manifest,
    write_shard,
)
from training.core.errors import CacheError
from training.core.metrics import unit_rows


def random_unit_rows(rows: int, dim: int, seed: int) -> np.ndarray:
    return unit_rows(np.random.default_rng(seed).normal(size=(rows, dim)))


def make_cache(
    root: Path, shard_sizes: list[int], dim: int = 8, dtype: str = "float32"
) -> CacheManifest:
    manifest = CacheManifest(encoder="test", dim=dim, dtype=dtype, modalities=["text"])
    start = 0
    for index, rows in enumerate(shard_sizes):
        ids = [f"r{start + i}" for i in range(rows)]
        metadata = pa.table({"id": ids, "caption": [f"caption {i}" for i in ids]})
        shard = write_shard(
            root, index, {"text": random_unit_rows(rows, dim, index)}, metadata, dtype
        )
        manifest.shards.append(shard)
        start += rows
    manifest.complete = True
    write_manifest(root, manifest)
    return manifest


class TestStrataCache:
    def test_round_trip(self, tmp_path: Path):
        make_cache(tmp_path, [5, 3])
        cache = EmbeddingCache.open(tmp_path)
        assert cache.rows == 8 and cache.dim == 8 and cache.modalities == ["text"]
        vectors = cache.embeddings("text")
        assert vectors.shape == (8, 8) and vectors.dtype == np.float32
        np.testing.assert_allclose(vectors[:5], random_unit_rows(5, 8, 0), atol=1e-6)
        assert cache.metadata().column("id").to_pylist() == [f"r{i}" for i in range(8)]
        assert cache.verify() == []
        assert (tmp_path / "text_emb" / "text_emb_00001.npy").is_file()

    def test_manifest_round_trip(self, tmp_path: Path):
        manifest = make_cache(tmp_path, [2])
        text = (tmp_path / "manifest.json").read_text()
        assert json.loads(text)["rows"] == 2
        assert CacheManifest.from_json(text, tmp_path) == manifest

    def test_verify_finds_corruption(self, tmp_path: Path):
        make_cache(tmp_path, [4, 4])
        path = tmp_path / "text_emb" / "text_emb_00001.npy"
        data = bytearray(path.read_bytes())
        data[-3] ^= 0xFF
        path.write_bytes(bytes(data))
        (tmp_path / "metadata" / "metadata_00000.parquet").unlink()
        faults = EmbeddingCache.open(tmp_path).verify()
        assert faults == [
            "missing metadata/metadata_00000.parquet",
            "checksum mismatch: text_emb/text_emb_00001.npy",
        ]

    def test_incomplete_cache_is_refused_unless_asked(self, tmp_path: Path):
        manifest = make_cache(tmp_path, [3])
        manifest.complete = False
        write_manifest(tmp_path, manifest)
        with pytest.raises(CacheError, match="incomplete"):
            EmbeddingCache.open(tmp_path)
        assert EmbeddingCache.open(tmp_path, allow_incomplete=True).rows == 3

    def test_unlisted_and_temporary_files_are_removed(self, tmp_path: Path):
        manifest = make_cache(tmp_path, [3])
        stray = [
            tmp_path / "text_emb" / "text_emb_00001.npy",
            tmp_path / "text_emb" / ".text_emb_00001.npy.tmp-999",
            tmp_path / "metadata" / "metadata_00001.parquet",
        ]
        for path in stray:
            path.write_bytes(b"half a shard")
        removed = remove_unlisted_files(tmp_path, manifest)
        assert sorted(removed) == sorted(stray)
        assert EmbeddingCache.open(tmp_path).verify() == []

    def test_shard_rows_must_agree(self, tmp_path: Path):
        with pytest.raises(CacheError, match="2 rows, metadata 3"):
            write_shard(
                tmp_path,
                0,
                {"text": random_unit_rows(2, 4, 0)},
                pa.table({"id": ["a", "b", "c"]}),
                "float16",
            )

    def test_not_a_cache(self, tmp_path: Path):
        with pytest.raises(CacheError, match="not found"):
            EmbeddingCache.open(tmp_path / "missing")
        with pytest.raises(CacheError, match=r"no manifest\.json and no"):
            EmbeddingCache.open(tmp_path)
        (tmp_path / "manifest.json").write_text("{broken")
        with pytest.raises(CacheError, match="not valid JSON"):
            EmbeddingCache.open(tmp_path)


def write_clip_retrieval_cache(root: Path, partitions: list[int], dim: int = 16) -> None:
    """What clip-retrieval inference writes: zero-padded partitions, float16, no manifest or id."""
    width = len(str(len(partitions)))
    for part, rows in enumerate(partitions):
        suffix = str(part).zfill(width)
        for folder, seed in (("img_emb", 10), ("text_emb", 20)):
            (root / folder).mkdir(parents=True, exist_ok=True)
            np.save(
                root / folder / f"{folder}_{suffix}.npy",
                random_unit_rows(rows, dim, seed + part).astype(np.float16),
            )
        (root / "metadata").mkdir(exist_ok=True)
        table = pa.table(
            {
                "image_path": [f"p{part}/{i}.jpg" for i in range(rows)],
                "caption": [f"caption {part}-{i}" for i in range(rows)],
                "url": [f"http://example/{part}/{i}" for i in range(rows)],
            }
        )
        pq.write_table(table, root / "metadata" / f"metadata_{suffix}.parquet")


class TestClipRetrievalLayout:
    def test_reads_as_is(self, tmp_path: Path):
        write_clip_retrieval_cache(tmp_path, [4] * 10 + [2])  # 11 partitions: names 00..10
        cache = EmbeddingCache.open(tmp_path)
        assert cache.manifest.source == "clip-retrieval" and cache.manifest.encoder is None
        assert cache.rows == 42 and cache.dim == 16 and cache.manifest.dtype == "float16"
        assert cache.modalities == ["text", "image"]
        assert [s.index for s in cache.manifest.shards] == list(range(11))
        metadata = cache.metadata()
        assert metadata.column("id").to_pylist() == [str(i) for i in range(42)]
        assert metadata.column("caption")[40].as_py() == "caption 10-0"
        np.testing.assert_allclose(
            cache.embeddings("image")[:4], random_unit_rows(4, 16, 10).astype(np.float16), atol=1e-3
        )
        assert cache.verify() == []

    def test_inconsistent_partition_is_an_error(self, tmp_path: Path):
        write_clip_retrieval_cache(tmp_path, [4, 4])
        np.save(
            tmp_path / "text_emb" / "text_emb_1.npy", random_unit_rows(3, 16, 0).astype(np.float16)
        )
        with pytest.raises(CacheError, match="shard 1 files disagree on row count"):
            EmbeddingCache.open(tmp_path)


def test_the_metadata_schema_is_the_schema_of_the_rows_read(tmp_path: Path):
    """`metadata_schema` reads a shard's parquet footer only; its schema is that of the rows
    `read_shard` returns (with the `id` the reader adds to a clip-retrieval shard), and an
    unreadable file is a CacheError naming it."""
    make_cache(tmp_path / "strata", [3])
    write_clip_retrieval_cache(tmp_path / "clip", [4])
    for root in (tmp_path / "strata", tmp_path / "clip"):
        cache = EmbeddingCache.open(root)
        shard = cache.manifest.shards[0]
        assert cache.metadata_schema(shard) == cache.read_shard(shard).metadata.schema
    (tmp_path / "clip" / "metadata" / "metadata_0.parquet").write_bytes(b"not parquet")
    with pytest.raises(CacheError, match=r"cannot read .*metadata_0\.parquet"):
        cache.metadata_schema(shard)


def test_manifest_with_unknown_fields_is_a_clear_error(tmp_path: Path):
    make_cache(tmp_path, [2])
    data = json.loads((tmp_path / "manifest.json").read_text())
    data["shards"][0]["surprise"] = 1
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(CacheError, match="malformed manifest"):
        EmbeddingCache.open(tmp_path)
