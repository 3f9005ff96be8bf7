"""`strata index verify`: a whole bundle passes; each kind of damage is named by file."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np
import pytest
from bundle_inputs import DIM, Inputs, assert_one_line_error
from safetensors.numpy import save_file

from indexer.format.manifest import read_manifest
from indexer.verify.check import verify_bundle


@pytest.fixture(scope="module")
def pristine(inputs: Inputs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("verify") / "bundles"
    inputs.build(out, store="none")  # damage to the files of a per-prefix layout
    return out / "v000001"


@pytest.fixture
def version(pristine: Path, tmp_path: Path) -> Path:
    """A copy of a freshly built version, to damage."""
    return Path(shutil.copytree(pristine, tmp_path / "v000001"))


def flip_byte(path: Path, offset: int = -5) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def edit_manifest(version: Path, change: Callable[[dict], None]) -> None:
    manifest = json.loads((version / "manifest.json").read_text())
    change(manifest)
    (version / "manifest.json").write_text(json.dumps(manifest))


def relist(version: Path, *names: str) -> None:
    """Record the current checksum and size of files (damage that the checksums do not see)."""

    def change(manifest: dict) -> None:
        for name in names:
            data = (version / name).read_bytes()
            manifest["files"][name].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))

    edit_manifest(version, change)


def test_a_whole_bundle_verifies(version: Path):
    report = verify_bundle(version)
    assert report.faults == [] and report.notes == [] and report.sampled_rows == 64


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda v: flip_byte(v / "prefix_16.faiss"), ["prefix_16.faiss: checksum mismatch"]),
        (lambda v: flip_byte(v / "postings_rows.npy"), ["postings_rows.npy: checksum mismatch"]),
        (lambda v: flip_byte(v / "ids.parquet", 100), ["ids.parquet: checksum mismatch"]),
        (lambda v: (v / "postings_values.npy").unlink(), ["missing postings_values.npy"]),
        (lambda v: (v / "stray.bin").write_bytes(b"?"), ["unlisted file stray.bin"]),
        (
            lambda v: (v / "prefix_4.faiss").write_bytes(b"x"),
            ["prefix_4.faiss: 1 bytes, manifest says 9645"],
        ),
    ],
    ids=["faiss-byte", "postings-byte", "ids-byte", "deleted", "unlisted", "truncated"],
)
def test_damaged_files_are_named(version: Path, damage, expected):
    damage(version)
    assert verify_bundle(version).faults == expected


def test_digests_taken_from_the_writer_are_compared_and_the_rest_read_back(version: Path):
    """What a build passes for the files it hashed while writing them: not read back, but
    compared with the manifest; every other file is still read and hashed."""
    files = read_manifest(version).files
    written = {name: record.sha256 for name, record in files.items() if name.endswith(".faiss")}
    assert verify_bundle(version, written=written).faults == []
    wrong = written | {"prefix_16.faiss": "0" * 64}
    assert verify_bundle(version, written=wrong).faults == ["prefix_16.faiss: checksum mismatch"]
    flip_byte(version / "ids.parquet", 100)
    flip_byte(version / "postings_rows.npy")
    assert verify_bundle(version, written=written).faults == [
        "postings_rows.npy: checksum mismatch",
        "ids.parquet: checksum mismatch",
    ]


def test_a_wrong_row_count_is_caught_in_every_file(version: Path):
    edit_manifest(version, lambda m: m.update(rows=601))
    faults = verify_bundle(version).faults
    for expected in (
        "prefix_4.faiss holds 600 rows, manifest says 601",
        "prefix_64.faiss holds 600 rows, manifest says 601",
        "ids.parquet holds 600 rows, manifest says 601",
        "postings_rows.npy: 2400 axis entries, expected rows·k = 601·4",
    ):
        assert expected in faults, faults


def test_stored_vectors_are_checked_against_the_cache(version: Path, inputs: Inputs):
    """A valid index of the wrong vectors (checksums updated to match) fails the sample check."""
    wrong = faiss.IndexFlatIP(8)
    x = np.random.default_rng(0).normal(size=(600, 8)).astype(np.float32)
    wrong.add(x / np.linalg.norm(x, axis=1, keepdims=True))
    faiss.write_index(wrong, str(version / "prefix_8.faiss"))
    relist(version, "prefix_8.faiss")
    faults = verify_bundle(version, sample=16).faults
    assert faults[0].startswith("prefix_8.faiss: row 0 disagrees with prefix_64.faiss by ")
    assert len(faults) == 17 and all(
        f.startswith("prefix_8.faiss: row ") and "differs from the cache's" in f for f in faults[1:]
    )


def test_an_artifact_copy_that_is_not_a_rotation_is_caught(version: Path):
    copy = version / "artifacts" / "grasp"
    rotation = np.eye(DIM, dtype=np.float32)
    rotation[0, 1] = 0.5
    save_file(
        {"rotation": rotation, "mean": np.zeros(DIM, np.float32)}, str(copy / "weights.safetensors")
    )
    artifact_manifest = json.loads((copy / "manifest.json").read_text())
    weights = (copy / "weights.safetensors").read_bytes()
    artifact_manifest["files"]["weights.safetensors"] = hashlib.sha256(weights).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(artifact_manifest))
    relist(version, "artifacts/grasp/weights.safetensors", "artifacts/grasp/manifest.json")
    (fault,) = verify_bundle(version).faults
    assert fault.startswith("artifacts/grasp: ") and "rotation is not orthogonal" in fault


def test_without_its_cache_a_bundle_still_verifies_with_a_note(version: Path, tmp_path: Path):
    edit_manifest(version, lambda m: m["source"].update(cache=str(tmp_path / "gone")))
    relist(version)  # (the manifest is not in its own file list)
    report = verify_bundle(version)
    assert report.faults == [] and report.sampled_rows == 0
    assert report.notes == [f"sample check skipped: embedding cache not found: {tmp_path / 'gone'}"]


def test_the_command_prints_ok_or_fault_lines(strata_main, version: Path):
    ok = strata_main("index", "verify", str(version))
    assert ok.returncode == 0 and ok.stdout.strip().endswith(
        "ok (64 rows checked against the cache)"
    )
    flip_byte(version / "postings_indptr.npy")
    (version / "prefix_32.faiss").unlink()
    damaged = strata_main("index", "verify", str(version))
    assert_one_line_error(damaged, str(version), "2 faults")
    assert damaged.stderr.splitlines()[:2] == [
        "FAULT missing prefix_32.faiss",
        "FAULT postings_indptr.npy: checksum mismatch",
    ]
