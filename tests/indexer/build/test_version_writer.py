"""The one version writer: each file recorded with its digest, size and rows; digests computed
while writing kept apart for verification; artifact copies byte for byte; the manifest last."""

from __future__ import annotations

from pathlib import Path

from indexer.build.version_writer import VersionWriter
from indexer.format.manifest import MANIFEST
from indexer.format.postings import CHUNKS, INDPTR, ROWS, VALUES
from training.core.files import sha256_file


def test_files_are_recorded_with_their_digest_size_and_rows(tmp_path: Path):
    writer = VersionWriter(tmp_path)
    (tmp_path / "ids.parquet").write_bytes(b"ids")
    (tmp_path / "prefix_4.faiss").write_bytes(b"index")
    writer.record({tmp_path / "ids.parquet": None}, 3)
    writer.record({tmp_path / "prefix_4.faiss": "d" * 64}, 3)  # hashed while written
    ids = writer.files["ids.parquet"]
    assert (ids.sha256, ids.bytes, ids.rows) == (sha256_file(tmp_path / "ids.parquet"), 3, 3)
    assert writer.files["prefix_4.faiss"].sha256 == "d" * 64
    assert writer.written == {"prefix_4.faiss": "d" * 64}  # only what was hashed on the way


def test_postings_files_count_offsets_and_entries(tmp_path: Path):
    writer = VersionWriter(tmp_path)
    names = (INDPTR, ROWS, CHUNKS, VALUES)
    for name in names:
        (tmp_path / name).write_bytes(name.encode())
    writer.record_postings(dict.fromkeys(tmp_path / n for n in names), 8, 30)
    assert [writer.files[n].rows for n in names] == [9, 30, 8, 30]


def test_artifacts_are_copied_and_the_manifest_written_last(tmp_path: Path):
    source = tmp_path / "artifact"
    source.mkdir()
    (source / "manifest.json").write_text("{}")
    (source / "weights.safetensors").write_bytes(b"weights")
    staging = tmp_path / "staging"
    staging.mkdir()
    writer = VersionWriter(staging)
    writer.copy_artifact("artifacts/grasp", sorted(source.iterdir()))
    assert list(writer.files) == [
        "artifacts/grasp/manifest.json",
        "artifacts/grasp/weights.safetensors",
    ]
    assert (staging / "artifacts/grasp/weights.safetensors").read_bytes() == b"weights"
    assert writer.files["artifacts/grasp/manifest.json"].rows is None

    class Manifest:
        def to_json(self) -> str:
            return '{"version": 1}\n'

    manifest = Manifest()
    assert writer.finish(manifest) is manifest  # type: ignore[arg-type]
    assert (staging / MANIFEST).read_text() == '{"version": 1}\n'
