"""The transform artifact format: round trip, and every bad artifact refused with a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from training.core.artifacts import ArtifactError, TransformArtifact, data_fingerprint
from training.core.granularity import default_contract
from training.core.metrics import drift
from training.core.rotations import reorthogonalise


def random_rotation(dim: int, seed: int = 0) -> np.ndarray:
    return reorthogonalise(np.random.default_rng(seed).normal(size=(dim, dim)))


def make_artifact(dim: int = 16) -> TransformArtifact:
    return TransformArtifact(
        method="grasp-vl",
        rotation=random_rotation(dim),
        mean=np.zeros(dim),
        contract=default_contract(dim),
        encoder="minilm",
        config={"steps": 3},
        data_fingerprint=data_fingerprint(np.ones((2, dim))),
        metrics={"selectivity": 0.9},
        extra={"k": 4},
    )


def test_round_trip(tmp_path: Path):
    artifact = make_artifact()
    artifact.save(tmp_path / "a")
    loaded = TransformArtifact.load(tmp_path / "a")
    np.testing.assert_array_equal(loaded.rotation, artifact.rotation)
    assert loaded.rotation.dtype == np.float32 and loaded.contract == artifact.contract
    assert (loaded.method, loaded.encoder, loaded.config, loaded.extra) == (
        "grasp-vl",
        "minilm",
        {"steps": 3},
        {"k": 4},
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]  # no staging left behind


def test_apply_keeps_full_length_cosine():
    artifact = make_artifact(32)
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(100, 32)), rng.normal(size=(100, 32))
    assert drift(a, b, artifact.apply(a), artifact.apply(b)) <= 1e-6


def test_overwrite_is_explicit(tmp_path: Path):
    make_artifact().save(tmp_path / "a")
    with pytest.raises(ArtifactError, match="exists"):
        make_artifact().save(tmp_path / "a")
    replacement = TransformArtifact.identity(16)
    replacement.save(tmp_path / "a", overwrite=True)
    assert TransformArtifact.load(tmp_path / "a").method == "identity"


def test_not_orthogonal_refused():
    with pytest.raises(ArtifactError, match="not orthogonal"):
        TransformArtifact("x", np.eye(16) * 1.01, np.zeros(16), default_contract(16))


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({"rotation": np.eye(16, dtype=np.float32)}, "lacks tensor"),
        (
            {"rotation": np.eye(16, dtype=np.float32), "mean": np.zeros(7, np.float32)},
            "mean must have shape",
        ),
        (
            {"rotation": np.ones((16, 16), np.float32), "mean": np.zeros(16, np.float32)},
            "not orthogonal",
        ),
        (
            {"rotation": np.eye(32, dtype=np.float32), "mean": np.zeros(32, np.float32)},
            "manifest dim 16",
        ),
    ],
)
def test_bad_weights_refused(tmp_path: Path, tensors, message: str):
    TransformArtifact.identity(16).save(tmp_path / "a")
    save_file(tensors, str(tmp_path / "a" / "weights.safetensors"))
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    manifest["files"] = {}  # skip the checksum to reach the tensor checks
    (tmp_path / "a" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=message):
        TransformArtifact.load(tmp_path / "a")


def test_checksum_and_format(tmp_path: Path):
    TransformArtifact.identity(16).save(tmp_path / "a")
    weights = tmp_path / "a" / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\x00\x00\x00\x40")
    with pytest.raises(ArtifactError, match="checksum"):
        TransformArtifact.load(tmp_path / "a")
    with pytest.raises(ArtifactError, match="not a transform artifact"):
        TransformArtifact.load(tmp_path / "missing")
    TransformArtifact.identity(16).save(tmp_path / "b")
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    manifest["contract"]["full"] = 17
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="must equal the dimension 16"):
        TransformArtifact.load(tmp_path / "b")


def test_apply_checks_shape():
    with pytest.raises(ArtifactError, match=r"shape \[N, 16\]"):
        TransformArtifact.identity(16).apply(np.zeros((3, 7)))
