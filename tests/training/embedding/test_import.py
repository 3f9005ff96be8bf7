"""`strata embed import`: clip-retrieval's layout (npy shards + parquet, or one JSONL of ids)
checked row by row and written as a cache that the pipeline takes, its encoder recorded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from service.cli import app
from training.core.cache import EmbeddingCache
from training.core.errors import InputError
from training.embedding.importing import ImportConfig, import_embeddings

DIM = 16


def unit_rows(rows: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(rows, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def clip_retrieval_folder(root: Path, sizes=(5, 3), parquet: bool = True) -> Path:
    """img_emb/img_emb_{i}.npy (+ metadata/metadata_{i}.parquet), clip-retrieval's names."""
    (root / "img_emb").mkdir(parents=True)
    start = 0
    for i, n in enumerate(sizes):
        np.save(root / "img_emb" / f"img_emb_{i}.npy", unit_rows(n, i).astype(np.float16))
        if parquet:
            (root / "metadata").mkdir(exist_ok=True)
            paths = [f"photos/{start + j}.jpg" for j in range(n)]
            table = pa.table({"image_path": paths, "caption": [f"photo {p}" for p in paths]})
            pq.write_table(table, root / "metadata" / f"metadata_{i}.parquet")
        start += n
    return root


def run(*args: str):
    return CliRunner().invoke(app, list(args), prog_name="strata")


def test_a_clip_retrieval_folder_becomes_a_cache(tmp_path: Path):
    source = clip_retrieval_folder(tmp_path / "clip")
    result = run(
        "embed", "import", str(source), "--encoder", "clip-vit-l", "--out", str(tmp_path / "c")
    )
    assert result.exit_code == 0, result.output
    assert "8 in 2 shards" in result.output
    cache = EmbeddingCache.open(tmp_path / "c")
    assert cache.manifest.encoder == "clip-vit-l" and cache.manifest.source == "import"
    assert cache.modalities == ["image"] and cache.rows == 8 and cache.dim == DIM
    ids = cache.metadata().column("id").to_pylist()
    assert ids[0] == "photos/0.jpg" and ids[-1] == "photos/7.jpg"  # image_path names rows
    assert cache.verify() == []
    expected = np.concatenate([unit_rows(5, 0), unit_rows(3, 1)]).astype(np.float16)
    assert np.allclose(cache.embeddings("image"), expected.astype(np.float32), atol=1e-3)


def test_jsonl_metadata_and_normalise(tmp_path: Path):
    source = clip_retrieval_folder(tmp_path / "clip", parquet=False)
    np.save(source / "img_emb" / "img_emb_1.npy", 3 * unit_rows(3, 1))
    ids = tmp_path / "ids.jsonl"
    ids.write_text("".join(json.dumps({"id": f"p{i}", "text": f"t{i}"}) + "\n" for i in range(8)))
    config = ImportConfig(encoder="mine", metadata=ids, normalise=True)
    summary = import_embeddings(source, tmp_path / "c", config)
    assert summary.rows == 8 and summary.normalised_rows == 3
    cache = EmbeddingCache.open(tmp_path / "c")
    assert cache.metadata().column("caption").to_pylist()[7] == "t7"
    assert np.allclose(np.linalg.norm(cache.embeddings("image"), axis=1), 1, atol=1e-2)


@pytest.mark.parametrize(
    "spoil, message",
    [
        (
            lambda s: np.save(s / "img_emb/img_emb_1.npy", 2 * unit_rows(3, 1)),
            "img_emb_1.npy row 0: norm 2, not 1 (3 rows off); pass --normalise",
        ),
        (
            lambda s: np.save(s / "img_emb/img_emb_1.npy", np.full((3, DIM), np.nan)),
            "img_emb_1.npy row 0: holds NaN or Inf",
        ),
        (
            lambda s: np.save(s / "img_emb/img_emb_1.npy", unit_rows(3, 1)[:, :8]),
            "img_emb_1.npy: rows of 8 values; the shards before have 16",
        ),
        (
            lambda s: np.save(s / "img_emb/img_emb_0.npy", unit_rows(5, 0)[0]),
            "img_emb_0.npy: expected a 2-d array",
        ),
        (
            lambda s: (s / "metadata/metadata_1.parquet").unlink(),
            "no metadata/metadata_1.parquet for shard 1",
        ),
        (
            lambda s: pq.write_table(
                pa.table({"id": ["a", "b", "a"]}), s / "metadata/metadata_1.parquet"
            ),
            "metadata_1.parquet row 2: id 'a' repeats",
        ),
        (
            lambda s: pq.write_table(pa.table({"id": ["x"]}), s / "metadata/metadata_1.parquet"),
            "metadata_1.parquet: 1 rows, the shard's embeddings 3",
        ),
    ],
)
def test_a_bad_file_is_one_line_naming_file_and_row(tmp_path: Path, spoil, message: str):
    source = clip_retrieval_folder(tmp_path / "clip")
    spoil(source)
    result = run("embed", "import", str(source), "--encoder", "e", "--out", str(tmp_path / "c"))
    assert result.exit_code != 0
    assert isinstance(result.exception, InputError), result.output
    assert message in str(result.exception)
    assert "\n" not in str(result.exception)


def test_jsonl_row_count_and_syntax_are_checked(tmp_path: Path):
    source = clip_retrieval_folder(tmp_path / "clip", parquet=False)
    short = tmp_path / "short.jsonl"
    short.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(6)))
    with pytest.raises(InputError, match=r"short\.jsonl: 6 rows, fewer than the embeddings"):
        import_embeddings(source, tmp_path / "a", ImportConfig("e", metadata=short))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": 1}\n{"id": 2\n')
    with pytest.raises(InputError, match=r"broken\.jsonl line 2: not JSON"):
        import_embeddings(source, tmp_path / "b", ImportConfig("e", metadata=broken))
    long = tmp_path / "long.jsonl"
    long.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(9)))
    with pytest.raises(InputError, match=r"long\.jsonl: more rows than the embeddings"):
        import_embeddings(source, tmp_path / "c", ImportConfig("e", metadata=long))


def test_an_occupied_output_is_refused_unless_overwritten(tmp_path: Path):
    source = clip_retrieval_folder(tmp_path / "clip")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="exists and is not empty"):
        import_embeddings(source, tmp_path / "c", ImportConfig("e"))
    assert import_embeddings(source, tmp_path / "c", ImportConfig("e", overwrite=True)).rows == 8
