"""The transform artifact: the one module that writes, reads and validates this format.

A directory (docs/reference/formats.md#transform-artifacts):

    manifest.json          format, method, encoder, dim, granularity contract, training config,
                           data fingerprint, evaluation metrics, extra (CEDAR: k and the concept
                           catalog), and the sha256 of the weights file
    weights.safetensors    rotation float32 [D, D] (orthogonal), mean float32 [D], and any
                           further named tensors of the method (`tensors`; CEDAR's vocabulary
                           readout: training/cedar/readout/vocabulary.py)

z' = rotation @ (z - mean). An artifact is written into a temporary sibling directory and renamed
into place, so a reader sees a whole artifact or none.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save

from training.core.errors import InputError
from training.core.files import sha256_file
from training.core.granularity import Contract, default_contract, validate_contract
from training.core.rotations import orthogonality_error

ARTIFACT_FORMAT = "strata.transform-artifact/1"
MANIFEST = "manifest.json"
WEIGHTS = "weights.safetensors"
ORTHOGONALITY_TOLERANCE = 1e-5


class ArtifactError(InputError):
    """An artifact that is missing, malformed, or whose rotation is not a rotation."""


def data_fingerprint(*arrays: np.ndarray) -> str:
    """sha256 over the shapes and float32 bytes of the training data."""
    digest = hashlib.sha256()
    for array in arrays:
        contiguous = np.ascontiguousarray(array, dtype=np.float32)
        digest.update(str(contiguous.shape).encode())
        digest.update(contiguous.tobytes())
    return digest.hexdigest()


@dataclass
class TransformArtifact:
    method: str
    rotation: np.ndarray
    mean: np.ndarray
    contract: Contract
    encoder: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    data_fingerprint: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, np.ndarray] = field(default_factory=dict)  # beside rotation and mean

    def __post_init__(self) -> None:
        self.rotation = np.ascontiguousarray(self.rotation, dtype=np.float32)
        self.mean = np.ascontiguousarray(self.mean, dtype=np.float32)
        check_weights(self.rotation, self.mean)
        self.contract = validate_contract(self.contract, self.dim)

    @classmethod
    def identity(cls, dim: int, method: str = "identity", **kwargs: Any) -> TransformArtifact:
        """Plain truncation: the unrotated space with the default contract."""
        return cls(method, np.eye(dim), np.zeros(dim), default_contract(dim), **kwargs)

    @property
    def dim(self) -> int:
        return int(self.rotation.shape[0])

    def apply(self, embeddings: np.ndarray, length: int | None = None) -> np.ndarray:
        """Rows z -> rotation @ (z - mean), float32 [N, D]; with `length`, its first `length`
        coordinates only [N, length] (the rotation's first rows: a prefix search needs no
        more), the same values."""
        z = np.asarray(embeddings, dtype=np.float32)
        if z.ndim != 2 or z.shape[1] != self.dim:
            raise ArtifactError(f"expected embeddings of shape [N, {self.dim}], got {z.shape}")
        rotation = self.rotation if length is None else self.rotation[:length]
        return (z - self.mean) @ rotation.T

    def manifest(self, weights_sha256: str) -> dict[str, Any]:
        return {
            "format": ARTIFACT_FORMAT,
            "method": self.method,
            "encoder": self.encoder,
            "dim": self.dim,
            "contract": {g.value: n for g, n in self.contract.items()},
            "config": self.config,
            "data_fingerprint": self.data_fingerprint,
            "metrics": self.metrics,
            "extra": self.extra,
            "files": {WEIGHTS: weights_sha256},
        }

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write the artifact atomically (temporary sibling directory, then rename)."""
        reserved = {"rotation", "mean"} & set(self.tensors)
        if reserved:
            raise ArtifactError(f"tensor name(s) {sorted(reserved)} are the artifact's own")
        extra = {name: np.ascontiguousarray(t) for name, t in sorted(self.tensors.items())}
        weights = save({"rotation": self.rotation, "mean": self.mean, **extra})
        checksum = hashlib.sha256(weights).hexdigest()
        manifest = (json.dumps(self.manifest(checksum), indent=2) + "\n").encode()
        return write_folder(Path(path), {WEIGHTS: weights, MANIFEST: manifest}, overwrite)

    @classmethod
    def load(cls, path: str | Path) -> TransformArtifact:
        """Read and validate: format, checksum, tensors, shapes, orthogonality, contract."""
        path = Path(path).expanduser()
        manifest_path, weights_path = path / MANIFEST, path / WEIGHTS
        if not manifest_path.is_file() or not weights_path.is_file():
            raise ArtifactError(
                f"not a transform artifact (needs {MANIFEST} and {WEIGHTS}): {path}"
            )
        try:
            manifest = json.loads(manifest_path.read_text())
        except json.JSONDecodeError as exc:
            raise ArtifactError(f"{manifest_path} is not valid JSON: {exc}") from exc
        if manifest.get("format") != ARTIFACT_FORMAT:
            raise ArtifactError(f"{path}: unsupported artifact format {manifest.get('format')!r}")
        expected = manifest.get("files", {}).get(WEIGHTS)
        if expected and sha256_file(weights_path) != expected:
            raise ArtifactError(f"{weights_path}: checksum does not match the manifest")
        try:
            tensors = load_file(str(weights_path))
        except (SafetensorError, OSError) as exc:
            raise ArtifactError(f"cannot read {weights_path}: {exc}") from exc
        missing = [name for name in ("rotation", "mean") if name not in tensors]
        if missing:
            raise ArtifactError(f"{weights_path} lacks tensor(s) {', '.join(missing)}")
        if manifest.get("dim") != tensors["rotation"].shape[0]:
            raise ArtifactError(
                f"{path}: manifest dim {manifest.get('dim')} but rotation is "
                f"{tensors['rotation'].shape}"
            )
        try:
            return cls(
                method=manifest["method"],
                rotation=tensors["rotation"],
                mean=tensors["mean"],
                contract=manifest["contract"],
                encoder=manifest.get("encoder"),
                config=manifest.get("config", {}),
                data_fingerprint=manifest.get("data_fingerprint", ""),
                metrics=manifest.get("metrics", {}),
                extra=manifest.get("extra", {}),
                tensors={n: t for n, t in tensors.items() if n not in ("rotation", "mean")},
            )
        except KeyError as exc:
            raise ArtifactError(f"{manifest_path} lacks {exc}") from exc
        except InputError as exc:
            raise ArtifactError(f"{path}: {exc}") from exc


def write_folder(path: Path, files: dict[str, bytes], overwrite: bool = False) -> Path:
    """A folder holding exactly `files` (name → bytes), written so a reader sees all or none.

    The files go into a staging sibling, are fsynced, and the staging folder is renamed into
    place; an existing folder (with `overwrite`) is renamed aside first and removed after.
    """
    path = path.expanduser()
    if path.exists() and not overwrite:
        raise ArtifactError(f"{path} exists; pass overwrite to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for name, payload in files.items():
        with (staging / name).open("wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
    if path.exists():
        retired = path.with_name(f".{path.name}.old-{os.getpid()}")
        path.rename(retired)
        staging.rename(path)
        shutil.rmtree(retired)
    else:
        staging.rename(path)
    return path


def check_weights(rotation: np.ndarray, mean: np.ndarray) -> None:
    """Refuse anything but a square orthogonal float32 rotation and a matching mean."""
    if rotation.ndim != 2 or rotation.shape[0] != rotation.shape[1]:
        raise ArtifactError(f"rotation must be square, got shape {rotation.shape}")
    if mean.shape != (rotation.shape[0],):
        raise ArtifactError(f"mean must have shape ({rotation.shape[0]},), got {mean.shape}")
    if not np.isfinite(rotation).all() or not np.isfinite(mean).all():
        raise ArtifactError("rotation or mean holds NaN or Inf")
    error = orthogonality_error(rotation)
    if error > ORTHOGONALITY_TOLERANCE:
        raise ArtifactError(
            f"rotation is not orthogonal: max |RᵀR − I| = {error:.2e} > {ORTHOGONALITY_TOLERANCE:g}"
        )
