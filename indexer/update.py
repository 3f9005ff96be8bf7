"""`strata index add | delete`: a new version with rows appended or removed, without a rebuild.

add — the rows of another cache (same encoder, dimension and modality as the bundle; every id
new, none repeated) are appended after the current version's rows. Only they are read, rotated
and CEDAR-encoded, with the bundle's own artifact copies (no --grasp/--cedar: a bundle is
self-contained); shards go through the same engine as a build (`--engine local | ray`). Each
prefix index is extended as indexer/index_edit.py says; the postings are the old CSR merged
with the new rows' runs (PostingsWriter with a base: `csr_from_runs([old, *new])`, chunked);
ids.parquet is the old row groups, then the new shards'.

delete — the rows of the given ids are removed and the others renumbered (row r becomes
r − the number of deleted rows before r), so row positions, FAISS ids and posting rows stay
contiguous and in the same order. No cache is read: each index is filtered from the base
version's files (indexer/index_edit.py), the postings filtered and renumbered
(`filter_postings`), the ids' rows dropped. Unknown ids are refused and named
(`--missing-ok` skips them); deleting nothing, or every row, is refused.

Against a full build of the same rows: the streamed Flat indexes, the postings and ids.parquet
hold the same rows, so searching them gives the same results and scores at every Flat prefix.
After an add they are the same bytes (the full build cuts the same shards; the tests compare
every checksum); after a delete of scattered rows, the same to float rounding (the build
rotates shards of other sizes, which BLAS may round differently in the last bit). HNSW and IVF
hold the same rows under the same ids, but their structure is not a rebuild's (graph insertion
order; a quantizer trained on the base's sample), so they agree as closely as two approximate
indexes do. Index types are kept from the base; the summary notes where a build at the new
size would plan a different one.

Both go through the build's tail (indexer/release.py): the directory's lock (the base is read
under it), staging, verify (for add, the sample is drawn from the added rows and checked
against the added cache), rename, CURRENT switch and Redis announcement, retention. The
manifest's `source` records the operation, the base version (name, manifest sha256, rows) and
the lineage of operations since the last build.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

from indexer.build import (
    ShardEngine,
    metadata_schema,
    shard_engine,
    source_record,
    write_batches,
)
from indexer.bundle import MANIFEST, Bundle, BundleManifest, FileRecord
from indexer.crashpoints import check_crash_setting, crash_point
from indexer.ids import IDS, IdsWriter, copy_ids, read_ids, unified_schema
from indexer.index_edit import open_extended, write_filtered
from indexer.index_plan import plan_indexes
from indexer.postings import INDPTR, ROWS, VALUES, Postings, PostingsWriter, filter_postings
from indexer.publish import Publisher
from indexer.release import Release, release_version
from indexer.verify import verify_bundle
from indexer.versions import BundleStore
from training.core.cache import EmbeddingCache
from training.core.errors import InputError
from training.core.files import fsync_tree, sha256_file

SHOWN_IDS = 5  # ids named in an error message


class UpdateError(InputError):
    """An add or delete the bundle cannot take (named inputs)."""


@dataclass(frozen=True)
class AddConfig:
    bundles: Path
    cache: Path
    keep: int = 3
    progress: bool = True
    verify_sample: int = 64
    engine: str = "local"
    ray_address: str | None = None


@dataclass(frozen=True)
class DeleteConfig:
    bundles: Path
    ids: tuple[str, ...]
    missing_ok: bool = False
    keep: int = 3
    verify_sample: int = 64


@dataclass
class UpdateSummary:
    """What an add or delete made, and how each file was made."""

    operation: str  # "add" | "delete"
    path: Path
    name: str
    base: str  # the version it started from
    base_rows: int
    rows: int
    changed_rows: int  # rows added or deleted
    seconds: float
    files: dict[str, int]  # relative path -> bytes
    actions: dict[str, str]  # file (or group of files) -> what was done to make it
    notes: list[str] = field(default_factory=list)
    missing_ids: list[str] = field(default_factory=list)  # delete --missing-ok: ids not found
    removed_versions: list[str] = field(default_factory=list)
    cleaned: list[Path] = field(default_factory=list)
    announced: str | None = None

    @property
    def bytes_on_disk(self) -> int:
        return sum(self.files.values())


# --- pure parts --------------------------------------------------------------------------------


def shown(ids: Sequence[str]) -> str:
    """A few ids for a message: `a, b, c, … (12 in all)`."""
    head = ", ".join(repr(i) for i in ids[:SHOWN_IDS])
    return head if len(ids) <= SHOWN_IDS else f"{head}, … ({len(ids)} in all)"


def check_new_ids(base_ids: pa.Array, new_ids: pa.Array, base: str, cache: Path) -> None:
    """Refuse ids the cache repeats, lacks, or that the bundle already holds."""
    if new_ids.null_count:
        raise UpdateError(f"{new_ids.null_count} rows of the cache {cache} have no id")
    counts = pc.value_counts(new_ids)
    repeated = [
        v.as_py()
        for v, n in zip(counts.field("values"), counts.field("counts"), strict=True)
        if n.as_py() > 1
    ]
    if repeated:
        raise UpdateError(f"the cache {cache} repeats ids: {shown(repeated)}")
    present = new_ids.filter(pc.is_in(new_ids, value_set=base_ids)).to_pylist()
    if present:
        raise UpdateError(
            f"{len(present)} ids of the cache {cache} are already in {base}: {shown(present)} "
            "(an add appends new rows; delete these first to replace them)"
        )


def rows_to_delete(
    base_ids: pa.Array, ids: Sequence[str], missing_ok: bool, base: str
) -> tuple[np.ndarray, list[str]]:
    """(new_row: int64 [N], the new position of each row, −1 where deleted; the ids given that
    the bundle lacks). Refuses unknown ids (unless missing_ok), nothing to delete, everything."""
    wanted = pa.array(sorted(set(ids)), type=pa.string())
    if len(wanted) == 0:
        raise UpdateError("no ids to delete: give --id ID (repeatable) or --ids FILE")
    missing = wanted.filter(pc.invert(pc.is_in(wanted, value_set=base_ids))).to_pylist()
    if missing and not missing_ok:
        raise UpdateError(
            f"{len(missing)} of the {len(wanted)} ids to delete are not in {base}: "
            f"{shown(missing)} (--missing-ok skips them)"
        )
    deleted = pc.is_in(base_ids, value_set=wanted).to_numpy(zero_copy_only=False)
    if not deleted.any():
        raise UpdateError(f"none of the {len(wanted)} ids are in {base}: nothing to delete")
    if deleted.all():
        raise UpdateError(f"deleting every row of {base} would leave an empty bundle")
    new_row = np.where(deleted, -1, np.cumsum(~deleted) - 1).astype(np.int64)
    return new_row, missing


def read_id_file(path: Path) -> list[str]:
    """Ids to delete, one a line (surrounding blanks stripped, empty lines skipped)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UpdateError(f"cannot read --ids {path}: {exc.strerror}") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def lineage(base: BundleManifest, step: dict[str, Any]) -> list[dict[str, Any]]:
    """The operations since the last build, this one last (the build first)."""
    history = base.source.get("lineage")
    if not isinstance(history, list):
        history = [
            {
                "operation": "build",
                "version": base.name,
                "cache": base.source.get("cache"),
                "rows": base.rows,
            }
        ]
    return [*history, step]


def replan_notes(base: Bundle, rows: int) -> list[str]:
    """Where a build of `rows` rows would choose another index than the base's (rule-chosen
    prefixes only; --index-type overrides are the user's)."""
    budget = int(base.manifest.build.get("memory_budget", 4 * 2**30))
    planned = {p.length: p for p in plan_indexes(rows, base.contract, budget)}
    notes = []
    for entry in base.manifest.prefixes:
        plan = planned.get(entry.length)
        if entry.reason.startswith("--index-type") or plan is None:
            continue
        if plan.factory != entry.factory or plan.ondisk != entry.ondisk:
            notes.append(
                f"prefix {entry.length} keeps {entry.factory}; a build of {rows} rows would "
                f"choose {plan.factory}{' (on disk)' if plan.ondisk else ''} — rebuild to re-plan"
            )
    return notes


# --- writing -----------------------------------------------------------------------------------


class FileRecords:
    """The manifest's `files` of a version being written into `staging`."""

    def __init__(self, staging: Path) -> None:
        self.staging = staging
        self.files: dict[str, FileRecord] = {}

    def add(self, digests: dict[Path, str | None], rows: int | None) -> None:
        for path, digest in digests.items():
            self.files[path.relative_to(self.staging).as_posix()] = FileRecord(
                digest or sha256_file(path), path.stat().st_size, rows
            )

    def postings(self, files: Mapping[Path, str | None], concepts: int, entries: int) -> None:
        """The three postings files (path → sha256 when computed while writing, else None)."""
        counts = {INDPTR: concepts + 1, ROWS: entries, VALUES: entries}
        for path, digest in files.items():
            self.add({path: digest}, counts[path.name])


def copy_artifacts(base: Bundle, records: FileRecords) -> None:
    """The base's artifact copies, byte for byte (the manifest keeps their sources)."""
    for source in base.manifest.artifacts.values():
        folder = records.staging / source.copy
        folder.mkdir(parents=True)
        for file in sorted((base.path / source.copy).iterdir()):
            shutil.copyfile(file, folder / file.name)
            records.add({folder / file.name: None}, None)


def new_manifest(
    base: Bundle,
    version: int,
    rows: int,
    records: FileRecords,
    source: dict[str, Any],
    build: dict[str, Any],
) -> BundleManifest:
    manifest = base.manifest
    return replace(
        manifest,
        version=version,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        rows=rows,
        source=source,
        postings={**manifest.postings, "entries": records.files[ROWS].rows},
        files=records.files,
        build={"faiss": faiss.__version__, "gpu": False, "training_rows": 0, **build},
    )


def base_reference(base: Bundle) -> dict[str, Any]:
    return {
        "name": base.name,
        "manifest_sha256": sha256_file(base.path / MANIFEST),
        "rows": base.rows,
    }


def write_added(
    staging: Path,
    version: int,
    base: Bundle,
    cache: EmbeddingCache,
    engine: ShardEngine,
    actions: dict[str, str],
    progress: bool,
    started: float,
) -> BundleManifest:
    """Write the base's rows plus the cache's into `staging` (fsynced); its manifest."""
    work = staging / "work"
    work.mkdir()
    old, rows = base.rows, base.rows + cache.rows
    records = FileRecords(staging)
    writers = []
    for entry in base.manifest.prefixes:
        writer, actions[entry.file] = open_extended(entry, base.path, staging, rows, work)
        writers.append(writer)
    n_concepts = 2 * base.dim
    postings = PostingsWriter(staging, work, n_concepts, base=Postings(base.path))
    actions["postings_*.npy"] = "merged: the base's CSR, then the new rows' runs"
    schema = unified_schema(
        [pq.read_schema(base.path / IDS)]
        + [metadata_schema(cache, shard) for shard in cache.manifest.shards]
    )
    ids = IdsWriter(staging / IDS, schema)
    copy_ids(base.path / IDS, ids)
    actions[IDS] = "the base's rows copied, the new rows appended"

    with tqdm(
        total=cache.rows, desc=f"add to {base.name}", unit="row", disable=not progress
    ) as bar:
        batches = engine(cache, base.manifest.modality, base.grasp, base.coder, old)
        first_row = write_batches(batches, old, writers, postings, ids, bar.update, UpdateError)
    if first_row != rows:
        raise UpdateError(f"the cache yielded {first_row - old} rows, its manifest lists {rows}")
    for writer in writers:
        records.add(writer.close(), rows)
    crash_point("after-prefix-index")
    entries = int(postings.totals.sum())
    records.postings(postings.close(), n_concepts, entries)
    crash_point("after-postings")
    records.add(ids.close(), ids.rows)
    copy_artifacts(base, records)
    work.rmdir()
    source = source_record(cache) | {
        "operation": "add",
        "cache_first_row": old,
        "base": base_reference(base),
        "lineage": lineage(
            base.manifest,
            {
                "operation": "add",
                "version": f"v{version:06d}",
                "cache": str(cache.root.resolve()),
                "rows": cache.rows,
            },
        ),
    }
    build = {
        "seconds": round(time.perf_counter() - started, 3),
        "operation": "add",
        "actions": dict(actions),
    }
    manifest = new_manifest(base, version, rows, records, source, build)
    (staging / MANIFEST).write_text(manifest.to_json())
    fsync_tree(staging)
    return manifest


def write_deleted(
    staging: Path,
    version: int,
    base: Bundle,
    new_row: np.ndarray,
    ids_digest: str,
    actions: dict[str, str],
    started: float,
) -> BundleManifest:
    """Write the base without the rows whose new_row is −1 into `staging`; its manifest."""
    keep = new_row >= 0
    rows = int(keep.sum())
    records = FileRecords(staging)
    for entry in base.manifest.prefixes:
        edited = write_filtered(entry, base.path, staging, new_row)
        records.add(edited.files, rows)
        actions[entry.file] = edited.action
    crash_point("after-prefix-index")
    base_postings = Postings(base.path)
    paths = filter_postings(base_postings, new_row, staging)
    entries = int(np.load(staging / INDPTR)[-1])
    records.postings(dict.fromkeys(paths), base_postings.concepts, entries)
    actions["postings_*.npy"] = "filtered: the deleted rows' entries dropped, rows renumbered"
    crash_point("after-postings")
    ids = IdsWriter(staging / IDS, unified_schema([pq.read_schema(base.path / IDS)]))
    copy_ids(base.path / IDS, ids, keep)
    records.add(ids.close(), ids.rows)
    actions[IDS] = "the kept rows copied"
    copy_artifacts(base, records)
    deleted = len(new_row) - rows
    source = {
        "operation": "delete",
        "rows": rows,
        "deleted_rows": deleted,
        "deleted_ids_sha256": ids_digest,
        "base": base_reference(base),
        "lineage": lineage(
            base.manifest,
            {"operation": "delete", "version": f"v{version:06d}", "rows": -deleted},
        ),
    }
    build = {
        "seconds": round(time.perf_counter() - started, 3),
        "operation": "delete",
        "actions": dict(actions),
    }
    manifest = new_manifest(base, version, rows, records, source, build)
    (staging / MANIFEST).write_text(manifest.to_json())
    fsync_tree(staging)
    return manifest


# --- the commands ------------------------------------------------------------------------------


def open_base(store: BundleStore) -> Bundle:
    """The published version (call with the lock held, so that it stays the base)."""
    if not store.root.is_dir():
        raise UpdateError(f"bundle directory not found: {store.root}")
    name = store.current()
    if name is None:
        raise UpdateError(
            f"{store.root} has no published bundle (no CURRENT) to change; "
            "make one with `strata index build`"
        )
    return Bundle.open_version(store.root / name)


def check_addable(base: Bundle, cache: EmbeddingCache) -> None:
    modality = base.manifest.modality
    if cache.rows == 0:
        raise UpdateError(f"the embedding cache {cache.root} holds no rows")
    if cache.dim != base.dim:
        raise UpdateError(
            f"dimension mismatch: {base.name} holds {base.dim}-d rows, the cache {cache.root} "
            f"{cache.dim}-d embeddings"
        )
    encoder, ours = cache.manifest.encoder, base.manifest.encoder
    if encoder and ours and encoder != ours:
        raise UpdateError(
            f"encoder mismatch: {base.name} was built from {ours!r} embeddings, the cache "
            f"{cache.root} holds {encoder!r} ones"
        )
    if modality not in cache.modalities:
        raise UpdateError(
            f"the cache {cache.root} has no {modality} embeddings ({', '.join(cache.modalities)}),"
            f" the modality of {base.name}"
        )


def cache_ids(cache: EmbeddingCache) -> pa.Array:
    """Every id of a cache, in row order (the metadata read shard by shard)."""
    arrays = [
        data.metadata.column("id").cast(pa.string()).combine_chunks()
        for data in cache.iter_shards()
    ]
    return pa.concat_arrays(arrays) if arrays else pa.array([], pa.string())


def summarise(
    operation: str, release: Release, base: Bundle, actions: dict[str, str], started: float
) -> UpdateSummary:
    return UpdateSummary(
        operation=operation,
        path=release.path,
        name=release.name,
        base=base.name,
        base_rows=base.rows,
        rows=release.manifest.rows,
        changed_rows=abs(release.manifest.rows - base.rows),
        seconds=time.perf_counter() - started,
        files=release.files,
        actions=actions,
        removed_versions=release.removed,
        cleaned=release.cleaned,
        announced=release.announced,
    )


def add_rows(
    config: AddConfig,
    publisher: Publisher | None = None,
    on_published: Callable[[Path], None] | None = None,
) -> UpdateSummary:
    """`strata index add`: a new version = the current one + the rows of `config.cache`."""
    check_crash_setting()
    started = time.perf_counter()
    cache = EmbeddingCache.open(config.cache)
    if publisher is not None:
        publisher.check()
    engine = shard_engine(config.engine, config.ray_address)
    store = BundleStore(config.bundles)
    actions: dict[str, str] = {}
    try:
        with store.lock():
            base = open_base(store)
            check_addable(base, cache)
            check_new_ids(read_ids(base.path / IDS), cache_ids(cache), base.name, cache.root)
            release = release_version(
                store,
                lambda staging, version: write_added(
                    staging, version, base, cache, engine, actions, config.progress, started
                ),
                lambda staging: verify_bundle(
                    staging, cache_dir=cache.root, sample=config.verify_sample
                ),
                config.keep,
                publisher,
                on_published,
            )
    finally:
        close = getattr(engine, "close", None)
        if close is not None:
            close()
    summary = summarise("add", release, base, actions, started)
    summary.notes = replan_notes(base, summary.rows)
    return summary


def delete_rows(
    config: DeleteConfig,
    publisher: Publisher | None = None,
    on_published: Callable[[Path], None] | None = None,
) -> UpdateSummary:
    """`strata index delete`: a new version = the current one without the rows of `config.ids`."""
    check_crash_setting()
    started = time.perf_counter()
    if publisher is not None:
        publisher.check()
    store = BundleStore(config.bundles)
    actions: dict[str, str] = {}
    with store.lock():
        base = open_base(store)
        base_ids = read_ids(base.path / IDS)
        new_row, missing = rows_to_delete(base_ids, config.ids, config.missing_ok, base.name)
        deleted = base_ids.filter(pa.array(new_row < 0)).to_pylist()
        digest = hashlib.sha256("\n".join(sorted(deleted)).encode()).hexdigest()
        release = release_version(
            store,
            lambda staging, version: write_deleted(
                staging, version, base, new_row, digest, actions, started
            ),
            lambda staging: verify_bundle(staging, sample=config.verify_sample),
            config.keep,
            publisher,
            on_published,
        )
    summary = summarise("delete", release, base, actions, started)
    summary.missing_ids = missing
    summary.notes = replan_notes(base, summary.rows)
    return summary
