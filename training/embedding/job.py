"""The embed job: corpus + encoder -> embedding cache, streamed in shards, resumable.

A shard covers the next `shard_rows` records of the corpus; its files are written atomically,
then the manifest is replaced to list it. A rerun with the same job (corpus, encoder, dtype,
shard size, modalities) skips the records of listed shards and deletes whatever a killed run
left unlisted, so a half-written shard is never taken for a whole one. Memory is bounded by one
shard of embeddings and metadata.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import ConfigDict, Field, field_validator
from tqdm import tqdm

from training.core.cache import (
    DTYPES,
    MANIFEST,
    CacheManifest,
    remove_unlisted_files,
    write_manifest,
    write_shard,
)
from training.core.config import ConfigModel
from training.core.encoders import Encoder
from training.core.encoders.images import ImageDecodeError, decode_image
from training.core.errors import CacheError, InputError
from training.corpora import Corpus, Record

log = logging.getLogger(__name__)


class EmbedConfig(ConfigModel):
    """How a corpus is embedded: rows per shard, the cache dtype (DTYPES), the modalities (text
    and/or image; None: what the first record has), and the job's batching."""

    model_config = ConfigDict(frozen=True)

    shard_rows: int = Field(50_000, ge=1)
    dtype: str = "float16"
    modalities: tuple[Literal["text", "image"], ...] | None = Field(None, min_length=1)
    overwrite: bool = False
    progress: bool = True
    decode_workers: int = 2
    encode_window: int = 2048  # records handed to the encoder at once (it sorts them by length)

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, dtype: str) -> str:
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        return dtype


@dataclass
class EmbedSummary:
    out: Path
    rows: int  # rows in the cache
    rows_written: int  # rows this run embedded (the rest were resumed)
    records: int
    shards_written: int
    shards_resumed: int
    corpus_skipped: int
    records_unusable: int
    seconds: float
    bytes_on_disk: int
    already_complete: bool = False
    removed_partial_files: list[str] = field(default_factory=list)

    @property
    def rows_per_second(self) -> float:
        return self.rows_written / self.seconds if self.seconds > 0 else 0.0


def embed_corpus(
    corpus: Corpus, encoder: Encoder, out: str | Path, config: EmbedConfig | None = None
) -> EmbedSummary:
    """Embed every record of `corpus` into the cache at `out` (creating or resuming it)."""
    config = config or EmbedConfig()
    out = Path(out).expanduser()
    started = time.perf_counter()
    modalities = _choose_modalities(corpus, encoder, config)
    job = {
        "corpus": corpus.describe(),
        "encoder": encoder.id,
        "dtype": config.dtype,
        "shard_rows": config.shard_rows,
        "modalities": list(modalities),
    }
    manifest = _start_or_resume(out, job, encoder, modalities, config.overwrite)
    image_root = corpus.image_root()
    if image_root is not None and manifest.image_root is None:
        manifest.image_root = str(image_root)  # written with the first shard's manifest
    removed = [str(p.relative_to(out)) for p in remove_unlisted_files(out, manifest)]
    if removed:
        log.warning("removed %d files a killed run left unlisted: %s", len(removed), removed[:5])
    resumed = len(manifest.shards)
    if manifest.complete:
        return _summary(out, manifest, resumed, 0, 0, started, already_complete=True)
    if resumed:
        log.info("resuming %s after %d finished shards (%d rows)", out, resumed, manifest.rows)

    skip = manifest.shards[-1].records_consumed if manifest.shards else 0
    records = iter(corpus)
    consumed = sum(1 for _ in itertools.islice(records, skip))
    if consumed < skip:
        raise CacheError(
            f"{out}: the corpus now has fewer records ({consumed}) than the cache covers"
        )
    embedder = _ShardEmbedder(encoder, modalities, config.decode_workers, image_root)
    # decoded images are large: a window of them is one encoder batch, not thousands
    window = encoder.batch_size if "image" in modalities else config.encode_window
    bar = tqdm(
        total=corpus.size_hint(),
        initial=consumed,
        unit="rec",
        desc=f"embed {encoder.id}",
        disable=not config.progress,
        dynamic_ncols=True,
    )
    rows_written = 0
    with bar, embedder:
        while chunk := list(itertools.islice(records, config.shard_rows)):
            index = manifest.shards[-1].index + 1 if manifest.shards else 0
            embeddings, metadata, skipped = embedder.embed(chunk, window, bar)
            shard = write_shard(out, index, embeddings, metadata, config.dtype)
            consumed += len(chunk)
            shard.records_consumed, shard.records_unusable = consumed, skipped
            manifest.shards.append(shard)
            write_manifest(out, manifest)
            rows_written += shard.rows
            bar.set_postfix(shards=len(manifest.shards), rows=manifest.rows)
    if not manifest.shards:
        raise InputError(f"corpus {corpus.describe()} yielded no records to embed")
    manifest.corpus_report = corpus.report.as_dict()
    manifest.complete = True
    write_manifest(out, manifest)
    summary = _summary(
        out, manifest, resumed, rows_written, len(manifest.shards) - resumed, started
    )
    summary.removed_partial_files = removed
    return summary


def _choose_modalities(corpus: Corpus, encoder: Encoder, config: EmbedConfig) -> tuple[str, ...]:
    if config.modalities is not None:
        wanted = config.modalities
    else:
        first = next(iter(corpus), None)
        if first is None:
            raise InputError(f"corpus {corpus.describe()} yielded no records to embed")
        wanted = tuple(m for m, v in (("text", first.text), ("image", first.image_path)) if v)
        if "image" in wanted and not encoder.has_image_tower:
            log.warning("encoder %s has no image tower: embedding texts only", encoder.id)
            wanted = tuple(m for m in wanted if m != "image")
    if "image" in wanted and not encoder.has_image_tower:
        raise InputError(f"encoder {encoder.id} has no image tower; it cannot embed images")
    if not wanted:
        raise InputError("nothing to embed: the records have neither text nor image")
    return wanted


def _start_or_resume(
    out: Path, job: dict[str, Any], encoder: Encoder, modalities: tuple[str, ...], overwrite: bool
) -> CacheManifest:
    fresh = CacheManifest(
        encoder=encoder.id,
        dim=encoder.dim,
        dtype=job["dtype"],
        modalities=list(modalities),
        job=job,
        encoder_provenance=encoder.provenance,
    )
    manifest_path = out / MANIFEST
    if out.exists() and not out.is_dir():
        raise CacheError(f"{out} is a file, not a cache folder")
    if manifest_path.is_file() and not overwrite:
        existing = CacheManifest.from_json(manifest_path.read_text(), manifest_path)
        if existing.job != job:
            differing = sorted(k for k in job if existing.job.get(k) != job[k])
            raise CacheError(
                f"{out} holds a cache of another job (differs in {', '.join(differing)}); "
                "choose another output folder or pass --overwrite"
            )
        return existing
    if out.exists() and not overwrite and any(out.iterdir()):
        raise CacheError(
            f"{out} exists and is not a Strata cache; choose an empty folder or --overwrite"
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    write_manifest(out, fresh)
    return fresh


def _summary(
    out: Path,
    manifest: CacheManifest,
    resumed: int,
    rows_written: int,
    written: int,
    started: float,
    already_complete: bool = False,
) -> EmbedSummary:
    return EmbedSummary(
        out=out,
        rows=manifest.rows,
        rows_written=rows_written,
        records=manifest.shards[-1].records_consumed if manifest.shards else 0,
        shards_written=written,
        shards_resumed=resumed,
        corpus_skipped=int(manifest.corpus_report.get("skipped", 0)),
        records_unusable=sum(s.records_unusable for s in manifest.shards),
        seconds=time.perf_counter() - started,
        bytes_on_disk=sum((out / p).stat().st_size for s in manifest.shards for p in s.files),
        already_complete=already_complete,
    )


class _ShardEmbedder:
    """Embeds one shard's records a window at a time; images decoded on worker threads, each
    distinct image path encoded once per window (captions of one image share its vector)."""

    def __init__(
        self,
        encoder: Encoder,
        modalities: tuple[str, ...],
        workers: int,
        image_root: Path | None = None,
    ) -> None:
        self.encoder, self.modalities, self.image_root = encoder, modalities, image_root
        self.pool = ThreadPoolExecutor(max_workers=workers) if "image" in modalities else None
        self.last_images: dict[str, np.ndarray] = {}

    def __enter__(self) -> _ShardEmbedder:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown()

    def embed(
        self, records: list[Record], window: int, bar: tqdm
    ) -> tuple[dict[str, np.ndarray], pa.Table, int]:
        parts: dict[str, list[np.ndarray]] = {m: [] for m in self.modalities}
        rows: list[dict[str, Any]] = []
        skipped = 0
        for batch in _batches(records, window):
            kept = [r for r in batch if self._has_modalities(r)]
            if "image" in self.modalities:
                images = self._image_vectors(kept)
                kept = [r for r in kept if r.image_path in images]
                parts["image"].append(
                    _stack([images[r.image_path] for r in kept], self.encoder.dim)
                )
            if "text" in self.modalities:
                parts["text"].append(self.encoder.encode_text([r.text for r in kept]))
            skipped += len(batch) - len(kept)
            rows.extend(_metadata_row(r, self.image_root) for r in kept)
            bar.update(len(batch))
        embeddings = {m: np.concatenate(p) for m, p in parts.items()}
        metadata = (
            pa.Table.from_pylist(rows) if rows else pa.table({"id": pa.array([], pa.string())})
        )
        return embeddings, metadata, skipped

    def _has_modalities(self, record: Record) -> bool:
        present = {"text": bool(record.text), "image": bool(record.image_path)}
        if all(present[m] for m in self.modalities):
            return True
        missing = [m for m in self.modalities if not present[m]]
        log.warning("skipped record %s: it has no %s", record.id, " or ".join(missing))
        return False

    def _image_vectors(self, records: list[Record]) -> dict[str, np.ndarray]:
        """Vectors of the batch's distinct images; an undecodable image is logged and left out."""
        assert self.pool is not None
        vectors = {
            p: self.last_images[p] for p in {r.image_path for r in records} if p in self.last_images
        }
        todo = sorted({r.image_path for r in records if r.image_path} - vectors.keys())
        decoded = [
            (p, img)
            for p, img in zip(todo, self.pool.map(_decode_or_none, todo), strict=True)
            if img
        ]
        if decoded:
            matrix = self.encoder.encode_image([img for _, img in decoded])
            vectors.update((p, row) for (p, _), row in zip(decoded, matrix, strict=True))
        self.last_images = vectors
        return vectors


def _decode_or_none(path: str) -> Any:
    try:
        return decode_image(path)
    except ImageDecodeError as exc:
        log.warning("skipped image: %s", exc)
        return None


def _stack(vectors: list[np.ndarray], dim: int) -> np.ndarray:
    return np.stack(vectors) if vectors else np.zeros((0, dim), np.float32)


def _batches(items: list[Record], size: int) -> Iterator[list[Record]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def stored_image_path(path: str | None, root: Path | None) -> str | None:
    """An image path as the cache stores it: relative (POSIX) to the corpus root when it lies
    under it, else as given."""
    if path is None or root is None:
        return path
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return path


def _metadata_row(record: Record, image_root: Path | None = None) -> dict[str, Any]:
    return {
        "id": record.id,
        "caption": record.text,
        "image_path": stored_image_path(record.image_path, image_root),
        "group": record.group,
        **record.fields,
    }
