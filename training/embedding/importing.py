"""Embeddings made elsewhere into an embedding cache: `strata embed import`.

The source is the layout clip-retrieval's inference writes (and this cache's own):

    SOURCE/img_emb/img_emb_0.npy            [rows_0, dim] floats, one file a shard, in the
    SOURCE/img_emb/img_emb_1.npy ...        order of their numbers (text_emb/ likewise)
    SOURCE/metadata/metadata_0.parquet ...  row-aligned: `id` (or `key`, or `image_path`),
                                            `caption`, `image_path`, any other column

or the same shards with one file of ids and metadata for all rows in order (`--metadata`:
JSON Lines, one object a row, or a parquet file). Every shard is checked before it is written
(2-d, one dimension throughout, rows finite, unit norm unless `normalise`, metadata rows and
ids unique); the first fault is one error naming the file and the row. The cache is written by
the cache module's own writer (`write_shard`, `write_manifest`: every file atomically, the
manifest last), and records the encoder named by the user: a spec this machine can load serves
text and image queries, any other name vector queries only.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from training.core.cache import (
    DTYPES,
    METADATA_DIR,
    MODALITY_DIRS,
    CacheManifest,
    load_npy,
    write_manifest,
    write_shard,
)
from training.core.errors import CacheError, InputError

NORM_TOLERANCE = 1e-2  # what `strata embed verify` accepts as unit norm
ID_COLUMNS = ("id", "key", "image_path")  # the first present names the rows


@dataclass(frozen=True)
class ImportConfig:
    encoder: str
    metadata: Path | None = None  # one file for all rows (.jsonl or .parquet)
    normalise: bool = False
    dtype: str = "float16"
    image_root: Path | None = None  # what relative `image_path` values are relative to
    overwrite: bool = False


@dataclass
class ImportSummary:
    out: Path
    rows: int
    shards: int
    modalities: list[str]
    dim: int
    normalised_rows: int
    seconds: float


def import_embeddings(source: Path, out: Path, config: ImportConfig) -> ImportSummary:
    """Check the shards under `source` and write them as a cache at `out` (one cache shard per
    source shard: memory is one shard's rows)."""
    started = time.perf_counter()
    if config.dtype not in DTYPES:
        raise InputError(f"dtype must be one of {', '.join(DTYPES)}, got {config.dtype!r}")
    if not config.encoder.strip():
        raise InputError("name the encoder that made the embeddings (--encoder)")
    shards = find_shards(source)
    modalities = sorted(
        {m for files in shards.values() for m in files}, key=list(MODALITY_DIRS).index
    )
    missing = [(i, m) for i, files in shards.items() for m in modalities if m not in files]
    if missing:
        index, modality = missing[0]
        raise InputError(f"{source}: shard {index} has no {MODALITY_DIRS[modality]} file")
    metadata = metadata_reader(source, config.metadata)
    out = prepare_output(out, config.overwrite)
    manifest = CacheManifest(
        encoder=config.encoder.strip(),
        dim=0,
        dtype=config.dtype,
        modalities=modalities,
        job={"import": str(source.resolve()), "normalise": config.normalise},
        encoder_provenance={"imported_from": str(source.resolve())},
        image_root=str(config.image_root.expanduser().resolve()) if config.image_root else None,
        source="import",
    )
    seen: dict[str, str] = {}
    normalised = 0
    for position, (index, files) in enumerate(sorted(shards.items())):
        embeddings = {}
        for modality in modalities:
            matrix, fixed = checked_matrix(files[modality], manifest.dim, config.normalise)
            manifest.dim = manifest.dim or matrix.shape[1]
            embeddings[modality] = matrix
            normalised += fixed
        rows = {len(m) for m in embeddings.values()}
        if len(rows) != 1:
            names = ", ".join(f"{files[m].name} {len(x)}" for m, x in embeddings.items())
            raise InputError(f"{source}: shard {index} files disagree on row count ({names})")
        table = metadata.table(index, rows.pop())
        offset = manifest.rows if config.metadata is not None else 0  # rows named in `where`
        table = with_ids(table, metadata.where(index), seen, manifest.rows, offset)
        shard = write_shard(out, position, embeddings, table, config.dtype)
        shard.records_consumed = manifest.rows + shard.rows
        manifest.shards.append(shard)
        write_manifest(out, manifest)
    metadata.finish()
    manifest.complete = True
    write_manifest(out, manifest)
    return ImportSummary(
        out=out,
        rows=manifest.rows,
        shards=len(manifest.shards),
        modalities=modalities,
        dim=manifest.dim,
        normalised_rows=normalised,
        seconds=time.perf_counter() - started,
    )


def find_shards(source: Path) -> dict[int, dict[str, Path]]:
    """{shard number: {modality: .npy file}} under img_emb/ and text_emb/."""
    if not source.is_dir():
        raise InputError(f"embeddings folder not found: {source}")
    shards: dict[int, dict[str, Path]] = {}
    for modality, folder in MODALITY_DIRS.items():
        pattern = re.compile(rf"^{folder}_(\d+)\.npy$")
        directory = source / folder
        for path in sorted(directory.iterdir()) if directory.is_dir() else []:
            if match := pattern.match(path.name):
                shards.setdefault(int(match.group(1)), {})[modality] = path
    if not shards:
        raise InputError(
            f"{source} holds no img_emb/img_emb_N.npy or text_emb/text_emb_N.npy shards"
        )
    return shards


def checked_matrix(path: Path, dim: int, normalise: bool) -> tuple[np.ndarray, int]:
    """A shard's rows as float32, checked: 2-d, `dim` columns (0: any), finite, unit norm (or
    scaled to it with `normalise`; a zero row cannot be); and how many rows were scaled."""
    array = load_npy(path, mmap=False)
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise InputError(f"{path}: expected a 2-d array of rows, got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.floating):
        raise InputError(f"{path}: expected floating-point rows, got {array.dtype}")
    if dim and array.shape[1] != dim:
        raise InputError(f"{path}: rows of {array.shape[1]} values; the shards before have {dim}")
    matrix = np.asarray(array, dtype=np.float32)
    bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
    if bad.size:
        raise InputError(f"{path} row {bad[0]}: holds NaN or Inf ({bad.size} such rows)")
    norms = np.linalg.norm(matrix, axis=1)
    off = np.flatnonzero(np.abs(norms - 1) > NORM_TOLERANCE)
    if not off.size:
        return matrix, 0
    if not normalise:
        raise InputError(
            f"{path} row {off[0]}: norm {norms[off[0]]:.4g}, not 1 ({off.size} rows off); "
            "pass --normalise to scale every row to unit norm"
        )
    zero = np.flatnonzero(norms == 0)
    if zero.size:
        raise InputError(f"{path} row {zero[0]}: all zeros, which no scale makes unit norm")
    return matrix / norms[:, None], int(off.size)


def prepare_output(out: Path, overwrite: bool) -> Path:
    out = out.expanduser()
    if out.exists() and not out.is_dir():
        raise CacheError(f"{out} is a file, not a cache folder")
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise CacheError(f"{out} exists and is not empty; choose another folder or --overwrite")
        for folder in (*MODALITY_DIRS.values(), METADATA_DIR):
            for path in (out / folder).glob("*") if (out / folder).is_dir() else []:
                path.unlink()
    out.mkdir(parents=True, exist_ok=True)
    return out


def with_ids(
    table: pa.Table, where: str, seen: dict[str, str], first_row: int, offset: int = 0
) -> pa.Table:
    """The table with an `id` column of unique strings: its `id`, else `key`, else
    `image_path`, else the global row number (`first_row` onwards); a repeated or empty id is
    an error naming its place (`where`, row number + `offset`)."""
    name = next((c for c in ID_COLUMNS if c in table.column_names), None)
    if name is None:
        ids = [str(first_row + i) for i in range(table.num_rows)]
    else:
        ids = ["" if v is None else str(v) for v in table.column(name).to_pylist()]
    for row, value in enumerate(ids, offset):
        if not value:
            raise InputError(f"{where} row {row}: empty {name}")
        if value in seen:
            raise InputError(f"{where} row {row}: id {value!r} repeats ({seen[value]})")
        seen[value] = f"{where} row {row}"
    if "id" in table.column_names:
        table = table.drop_columns(["id"])
    if "text" in table.column_names and "caption" not in table.column_names:
        table = table.rename_columns(["caption" if c == "text" else c for c in table.column_names])
    return table.append_column("id", pa.array(ids, pa.string()))


class MetadataReader:
    """Each shard's metadata: its own metadata/metadata_N.parquet, or the next rows of one file
    of all rows (JSON Lines or parquet)."""

    def __init__(self, source: Path, single: Path | None) -> None:
        self.source, self.single = source, single
        self.rows: Iterator[tuple[int, dict]] | None = None
        self.line = 0
        self.files: dict[int, Path] = {}
        pattern = re.compile(r"^metadata_(\d+)\.parquet$")
        directory = source / METADATA_DIR
        for path in directory.iterdir() if directory.is_dir() else []:
            if match := pattern.match(path.name):
                self.files[int(match.group(1))] = path
        if single is not None:
            if not single.is_file():
                raise InputError(f"metadata file not found: {single}")
            self.rows = self._single_rows(single)

    def where(self, index: int) -> str:
        return str(self.single) if self.single else str(self.shard_file(index))

    def shard_file(self, index: int) -> Path:
        if index not in self.files:
            raise InputError(
                f"{self.source}: no {METADATA_DIR}/metadata_{index}.parquet for shard {index}; "
                "give ids and metadata with --metadata FILE.jsonl"
            )
        return self.files[index]

    def table(self, index: int, rows: int) -> pa.Table:
        if self.rows is None:
            path = self.shard_file(index)
            try:
                table = pq.read_table(path)
            except (OSError, pa.ArrowInvalid) as exc:
                raise InputError(f"cannot read {path}: {exc}") from exc
            if table.num_rows != rows:
                raise InputError(f"{path}: {table.num_rows} rows, the shard's embeddings {rows}")
            return table
        taken = []
        for _ in range(rows):
            row = next(self.rows, None)
            if row is None:
                raise InputError(
                    f"{self.single}: {self.line} rows, fewer than the embeddings' "
                    f"(shard {index} needs rows up to {self.line + rows - len(taken)})"
                )
            taken.append(row[1])
        try:
            return pa.Table.from_pylist(taken)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise InputError(f"{self.single}: a column's values disagree in type ({exc})") from None

    def finish(self) -> None:
        """Error when the single metadata file holds more rows than the embeddings."""
        if self.rows is not None and next(self.rows, None) is not None:
            raise InputError(f"{self.single}: more rows than the embeddings ({self.line} or more)")

    def _single_rows(self, path: Path) -> Iterator[tuple[int, dict]]:
        if path.suffix == ".parquet":
            try:
                table = pq.read_table(path)
            except (OSError, pa.ArrowInvalid) as exc:
                raise InputError(f"cannot read {path}: {exc}") from exc
            for row in table.to_pylist():
                self.line += 1
                yield self.line, row
            return
        with path.open(encoding="utf-8") as lines:
            for number, text in enumerate(lines, 1):
                if not text.strip():
                    continue
                try:
                    row = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise InputError(f"{path} line {number}: not JSON ({exc.msg})") from None
                if not isinstance(row, dict):
                    raise InputError(f"{path} line {number}: not a JSON object")
                self.line += 1
                yield number, row


def metadata_reader(source: Path, single: Path | None) -> MetadataReader:
    return MetadataReader(source, single.expanduser() if single else None)
