"""The embedding cache: the one module that writes, reads and checks this format.

Layout (clip-retrieval / embedding-reader compatible, so a clip-retrieval cache reads as is):

    img_emb/img_emb_{i}.npy           float16 or float32 [rows_i, dim], L2-normalised
    text_emb/text_emb_{i}.npy         same rows as img_emb (when both exist)
    metadata/metadata_{i}.parquet     row-aligned; `id` (unique), `caption`, `image_path`
                                      (relative to the manifest's `image_root` when it is
                                      set; absolute in caches written before), ...
    manifest.json                     ours: encoder, dim, dtype, shards with rows and checksums

Every file is written to a temporary name and renamed into place; a shard exists for readers
only once the manifest lists it, and the manifest itself is replaced atomically. A cache
without a manifest is read as clip-retrieval wrote it: shards paired by their number, ids made
from row numbers when the metadata has no `id` column.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from training.core.errors import CacheError
from training.core.files import atomic_write_bytes, sha256_file

Read = TypeVar("Read", pa.Table, pa.Schema)

CACHE_FORMAT = "strata.embedding-cache/1"
MANIFEST = "manifest.json"
MODALITY_DIRS = {"text": "text_emb", "image": "img_emb"}
METADATA_DIR = "metadata"
DTYPES = ("float16", "float32")
_SHARD_FILE = re.compile(r"^(img_emb|text_emb|metadata)_(\d+)\.(npy|parquet)$")


def shard_file(kind: str, index: int) -> str:
    """Relative path of a shard's file; `kind` is a modality or `metadata`."""
    if kind == "metadata":
        return f"{METADATA_DIR}/metadata_{index:05d}.parquet"
    stem = MODALITY_DIRS[kind]
    return f"{stem}/{stem}_{index:05d}.npy"


@dataclass
class Shard:
    index: int
    rows: int
    files: dict[str, str]  # relative path -> sha256 ("" when unknown, e.g. clip-retrieval)
    records_consumed: int = 0  # corpus records read up to the end of this shard (for resume)
    records_unusable: int = 0  # records the job could not embed (no usable image or text)

    def path(self, kind: str) -> str | None:
        wanted = shard_file(kind, self.index).split("/")[0]
        return next((p for p in self.files if p.startswith(wanted + "/")), None)


@dataclass
class CacheManifest:
    encoder: str | None
    dim: int
    dtype: str
    modalities: list[str]
    shards: list[Shard] = field(default_factory=list)
    complete: bool = False
    job: dict[str, Any] = field(default_factory=dict)
    encoder_provenance: dict[str, Any] = field(default_factory=dict)
    corpus_report: dict[str, Any] = field(default_factory=dict)
    image_root: str | None = None  # what relative `image_path` values are relative to
    source: str = "strata"
    format: str = CACHE_FORMAT

    @property
    def rows(self) -> int:
        return sum(shard.rows for shard in self.shards)

    def to_json(self) -> str:
        data = asdict(self)
        data["rows"] = self.rows
        return json.dumps(data, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: Path) -> CacheManifest:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CacheError(f"{where} is not valid JSON: {exc}") from exc
        if data.get("format") != CACHE_FORMAT:
            raise CacheError(f"{where}: unsupported cache format {data.get('format')!r}")
        data.pop("rows", None)
        try:
            data["shards"] = [Shard(**shard) for shard in data.get("shards", [])]
            return cls(**data)
        except TypeError as exc:  # missing or unknown fields
            raise CacheError(f"{where}: malformed manifest ({exc})") from exc


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def write_manifest(root: Path, manifest: CacheManifest) -> None:
    atomic_write_bytes(root / MANIFEST, manifest.to_json().encode())


def write_shard(
    root: Path, index: int, embeddings: dict[str, np.ndarray], metadata: pa.Table, dtype: str
) -> Shard:
    """Write one shard's files atomically and return its manifest entry (not yet published)."""
    rows = metadata.num_rows
    payloads = {shard_file("metadata", index): parquet_bytes(metadata)}
    for modality, matrix in embeddings.items():
        if matrix.shape[0] != rows:
            raise CacheError(
                f"shard {index}: {modality} has {matrix.shape[0]} rows, metadata {rows}"
            )
        payloads[shard_file(modality, index)] = npy_bytes(matrix.astype(dtype, copy=False))
    for relative, payload in payloads.items():
        atomic_write_bytes(root / relative, payload)
    checksums = {relative: hashlib.sha256(p).hexdigest() for relative, p in payloads.items()}
    return Shard(index=index, rows=rows, files=checksums)


def remove_unlisted_files(root: Path, manifest: CacheManifest) -> list[Path]:
    """Delete temporaries and shard files the manifest does not list (left by a killed job)."""
    listed = {root / p for shard in manifest.shards for p in shard.files}
    removed = []
    for folder in (*MODALITY_DIRS.values(), METADATA_DIR):
        directory = root / folder
        if not directory.is_dir():
            continue
        for path in directory.iterdir():
            if path not in listed and (path.name.startswith(".") or _SHARD_FILE.match(path.name)):
                path.unlink()
                removed.append(path)
    return removed


def load_npy(path: Path, mmap: bool = True) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise CacheError(f"cannot read {path}: {exc}") from exc


@dataclass
class ShardData:
    shard: Shard
    embeddings: dict[str, np.ndarray]
    metadata: pa.Table


class EmbeddingCache:
    """A cache on disk, read shard by shard (bounded memory) or whole."""

    def __init__(self, root: Path, manifest: CacheManifest) -> None:
        self.root = root
        self.manifest = manifest

    @classmethod
    def open(cls, root: str | Path, allow_incomplete: bool = False) -> EmbeddingCache:
        root = Path(root).expanduser()
        if not root.is_dir():
            raise CacheError(f"embedding cache not found: {root}")
        manifest_path = root / MANIFEST
        if manifest_path.is_file():
            manifest = CacheManifest.from_json(manifest_path.read_text(), manifest_path)
            if not manifest.complete and not allow_incomplete:
                raise CacheError(
                    f"{root} is incomplete ({len(manifest.shards)} shards, {manifest.rows} rows so "
                    "far); rerun the same `strata embed` command to finish it"
                )
        else:
            manifest = discover_clip_retrieval(root)
        return cls(root, manifest)

    @property
    def dim(self) -> int:
        return self.manifest.dim

    @property
    def rows(self) -> int:
        return self.manifest.rows

    @property
    def modalities(self) -> list[str]:
        return list(self.manifest.modalities)

    def read_shard(self, shard: Shard, mmap: bool = True) -> ShardData:
        embeddings = {}
        for modality in self.manifest.modalities:
            relative = shard.path(modality)
            if relative is None:
                raise CacheError(f"shard {shard.index} has no {modality} embeddings")
            embeddings[modality] = load_npy(self.root / relative, mmap)
        metadata = self._read_metadata(shard, pq.read_table)
        if "id" not in metadata.column_names:
            start = self._row_offset(shard)
            ids = pa.array([str(i) for i in range(start, start + shard.rows)])
            metadata = metadata.append_column("id", ids)
        return ShardData(shard, embeddings, metadata)

    def metadata_schema(self, shard: Shard) -> pa.Schema:
        """A shard's metadata schema from its parquet footer (no rows read), with the `id`
        column `read_shard` adds where a clip-retrieval cache lacks it."""
        schema = self._read_metadata(shard, pq.read_schema)
        return schema if "id" in schema.names else schema.append(pa.field("id", pa.string()))

    def _read_metadata(self, shard: Shard, read: Callable[[Path], Read]) -> Read:
        """`read` of a shard's metadata parquet; a missing or unreadable file is a CacheError."""
        relative = shard.path("metadata")
        if relative is None:
            raise CacheError(f"shard {shard.index} of {self.root} has no metadata file")
        try:
            return read(self.root / relative)
        except (OSError, pa.ArrowInvalid) as exc:
            raise CacheError(f"cannot read {self.root / relative}: {exc}") from exc

    def iter_shards(self) -> Iterator[ShardData]:
        for shard in self.manifest.shards:
            yield self.read_shard(shard)

    def embeddings(self, modality: str = "text") -> np.ndarray:
        """All rows of one modality as float32 [rows, dim] (loads the whole cache)."""
        if modality not in self.manifest.modalities:
            raise CacheError(f"{self.root} has no {modality} embeddings ({self.modalities})")
        if not self.manifest.shards:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.concatenate(
            [np.asarray(d.embeddings[modality], dtype=np.float32) for d in self.iter_shards()]
        )

    def metadata(self) -> pa.Table:
        tables = [d.metadata for d in self.iter_shards()]
        if not tables:
            return pa.table({"id": pa.array([], pa.string())})
        return pa.concat_tables(tables, promote_options="permissive")

    def _row_offset(self, shard: Shard) -> int:
        offset = 0
        for other in self.manifest.shards:
            if other.index == shard.index:
                return offset
            offset += other.rows
        raise CacheError(f"shard {shard.index} is not part of {self.root}")

    def verify(self) -> list[str]:
        """Every fault found: missing files, checksum or row-count mismatches, bad norms."""
        faults = []
        for shard in self.manifest.shards:
            missing = [p for p in shard.files if not (self.root / p).is_file()]
            faults.extend(f"missing {relative}" for relative in missing)
            if missing:
                continue
            corrupt = [
                relative
                for relative, checksum in shard.files.items()
                if checksum and sha256_file(self.root / relative) != checksum
            ]
            faults.extend(f"checksum mismatch: {relative}" for relative in corrupt)
            if corrupt:
                continue
            try:
                data = self.read_shard(shard)
            except CacheError as exc:
                faults.append(str(exc))
                continue
            if data.metadata.num_rows != shard.rows:
                found = data.metadata.num_rows
                faults.append(f"shard {shard.index}: metadata has {found} rows, not {shard.rows}")
            for modality, matrix in data.embeddings.items():
                if matrix.shape != (shard.rows, self.dim):
                    expected = (shard.rows, self.dim)
                    faults.append(
                        f"shard {shard.index}: {modality} shape {matrix.shape}, not {expected}"
                    )
                    continue
                norms = np.linalg.norm(np.asarray(matrix, dtype=np.float32), axis=1)
                worst = float(np.abs(norms - 1).max()) if norms.size else 0.0
                if worst > 1e-2:
                    faults.append(
                        f"shard {shard.index}: {modality} rows not unit-norm ({worst:.3g})"
                    )
        return faults


def discover_clip_retrieval(root: Path) -> CacheManifest:
    """A manifest for a cache clip-retrieval's inference wrote (no manifest of its own)."""
    found: dict[int, dict[str, str]] = {}
    for folder in (*MODALITY_DIRS.values(), METADATA_DIR):
        directory = root / folder
        if not directory.is_dir():
            continue
        for path in directory.iterdir():
            match = _SHARD_FILE.match(path.name)
            if match and match.group(1) == folder:
                found.setdefault(int(match.group(2)), {})[f"{folder}/{path.name}"] = ""
    if not found:
        raise CacheError(
            f"{root} holds no {MANIFEST} and no img_emb/, text_emb/ or metadata/ shards"
        )
    modalities = [
        m
        for m, d in MODALITY_DIRS.items()
        if all(any(p.startswith(d + "/") for p in f) for f in found.values())
    ]
    if not modalities:
        raise CacheError(f"{root}: no modality has embeddings in every shard")
    shards, dims, dtypes = [], set(), set()
    for index in sorted(found):
        files = found[index]
        if not any(p.startswith(METADATA_DIR + "/") for p in files):
            raise CacheError(f"{root}: shard {index} has embeddings but no metadata parquet")
        rows = set()
        for path in files:
            if path.endswith(".npy"):
                array = load_npy(root / path)
                if array.ndim != 2:
                    raise CacheError(
                        f"{root / path}: expected a 2-d array, got shape {array.shape}"
                    )
                rows.add(array.shape[0])
                dims.add(array.shape[1])
                dtypes.add(str(array.dtype))
            else:
                rows.add(pq.ParquetFile(root / path).metadata.num_rows)
        if len(rows) != 1:
            raise CacheError(f"{root}: shard {index} files disagree on row count {sorted(rows)}")
        shards.append(Shard(index=index, rows=rows.pop(), files=files))
    if len(dims) != 1 or len(dtypes) != 1:
        raise CacheError(f"{root}: shards disagree on dim {sorted(dims)} or dtype {sorted(dtypes)}")
    return CacheManifest(
        encoder=None,
        dim=dims.pop(),
        dtype=dtypes.pop(),
        modalities=modalities,
        shards=shards,
        complete=True,
        source="clip-retrieval",
    )
