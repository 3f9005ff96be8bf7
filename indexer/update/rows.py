"""`strata index add | delete`: a new version with rows appended or removed, without a rebuild.

add — the rows of another cache (same encoder, dimension and modality as the bundle; every id
new, none repeated) are appended after the current version's rows. Only they are read, rotated
and CEDAR-encoded, with the bundle's own artifact copies (no --grasp/--cedar: a bundle is
self-contained); shards go through the same engine as a build (`--engine local | ray`). Each
prefix index is extended as indexer/update/index_edit.py says; the postings are the old CSR merged
with the new rows' runs (PostingsWriter with a base: `csr_from_runs([old, *new])`, chunked);
ids.parquet is the old row groups, then the new shards'.

delete — the rows of the given ids are removed and the others renumbered (row r becomes
r − the number of deleted rows before r), so row positions, FAISS ids and posting rows stay
contiguous and in the same order. No cache is read: each index is filtered from the base
version's files (indexer/update/index_edit.py), the postings filtered and renumbered
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
size would plan a different one. Their search parameters are not kept: both operations re-tune
every approximate index to the base's recall target on the new version's rows
(indexer/format/tuning.py), since the recall a fixed efSearch or nprobe reaches falls as rows are
added (the setting tuned at 50k rows gives recall@10 0.90 at 1M) — a kept setting would
silently miss the target the manifest claims.

Both go through the build's tail (indexer/versions/release.py): the directory's lock (the base
is read under it), staging, verify (for add, the sample is drawn from the added rows and checked
against the added cache), rename, CURRENT switch and Redis announcement, retention. The
manifest's `source` records the operation, the base version (name, manifest sha256, rows) and
the lineage of operations since the last build.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ConfigDict

from indexer.build.engines import ShardEngine, running_engine
from indexer.build.inputs import source_record
from indexer.build.shard_step import ShardSource
from indexer.build.version_writer import VersionWriter
from indexer.format.bundle import MANIFEST, Bundle, BundleManifest
from indexer.format.ids import IDS, IdsWriter, copy_ids, read_ids, shard_schema, unified_schema
from indexer.format.index_plan import plan_indexes
from indexer.format.postings import INDPTR, ROWS, Postings, PostingsWriter, filter_postings
from indexer.format.store import VECTORS as STORE_VECTORS
from indexer.format.store import StoreWriter, write_filtered_store
from indexer.format.tuning import RECALL_TARGET
from indexer.update.index_edit import open_extended, write_filtered
from indexer.update.row_changes import (
    UpdateError,
    cache_ids,
    check_addable,
    check_new_ids,
    open_base,
    rows_to_delete,
)
from indexer.verify.check import verify_bundle
from indexer.versions.bundle_store import BundleStore
from indexer.versions.crashpoints import check_crash_setting, crash_point
from indexer.versions.publish import Publisher
from indexer.versions.release import Release, release_version
from training.core.cache import EmbeddingCache
from training.core.config import ConfigModel
from training.core.files import sha256_file


class AddConfig(ConfigModel):
    """What `strata index add` is asked to do (its flags); immutable once made."""

    model_config = ConfigDict(frozen=True)

    bundles: Path
    cache: Path
    keep: int = 3
    progress: bool = True
    verify_sample: int = 64
    engine: str = "local"
    ray_address: str | None = None


class DeleteConfig(ConfigModel):
    """What `strata index delete` is asked to do (its flags); immutable once made."""

    model_config = ConfigDict(frozen=True)

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


def copy_artifacts(base: Bundle, writer: VersionWriter) -> None:
    """The base's artifact copies, byte for byte (the manifest keeps their sources)."""
    for source in base.manifest.artifacts.values():
        writer.copy_artifact(source.copy, sorted((base.path / source.copy).iterdir()))


def new_manifest(
    base: Bundle,
    version: int,
    rows: int,
    writer: VersionWriter,
    source: dict[str, Any],
    operation: str,
    actions: dict[str, str],
    started: float,
) -> BundleManifest:
    """The base's manifest for the new version: its rows, source, files, its approximate
    indexes re-tuned to the base's recall target on the new version's rows (their recall at a
    fixed setting changes with the rows they hold), and how it was made."""
    manifest = base.manifest
    target = recall_target(manifest)
    prefixes, tuning_seconds = writer.tune(manifest.prefixes, target, store=manifest.store)
    actions["search parameters"] = f"re-tuned to recall@10 {target} on the new rows"
    build = {
        "seconds": round(time.perf_counter() - started, 3),
        "tuning_seconds": tuning_seconds,
        "recall_target": target,
        "operation": operation,
        "actions": dict(actions),
    }
    return replace(
        manifest,
        version=version,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        rows=rows,
        source=source,
        prefixes=prefixes,
        postings={**manifest.postings, "entries": writer.files[ROWS].rows},
        files=writer.files,
        build={"faiss": faiss.__version__, "gpu": False, "training_rows": 0, **build},
    )


def recall_target(manifest: BundleManifest) -> float:
    """The target the base was tuned to (its build's, kept through adds and deletes)."""
    return float(manifest.build.get("recall_target", RECALL_TARGET))


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
    writer = VersionWriter(staging)
    writer.work.mkdir()
    old, rows = base.rows, base.rows + cache.rows
    writers: list = []
    for entry in base.manifest.prefixes:
        if entry.store:
            continue  # served from the store, extended once below
        extended, actions[entry.file] = open_extended(entry, base.path, staging, rows, writer.work)
        writers.append(extended)
    if base.store is not None:
        shared = base.store
        writers.append(
            StoreWriter(staging, rows, shared.dim, shared.lengths, shared.dtype, base=shared)
        )
        actions[STORE_VECTORS] = "copied + extended: the stored rows, then the new ones"
    postings = PostingsWriter(
        staging, writer.work, base.coder.concepts, base=Postings(base.path), rows=rows
    )
    actions["postings_*.npy"] = "merged: the base's CSR, then the new rows' runs"
    schema = unified_schema(
        [pq.read_schema(base.path / IDS)]
        + [shard_schema(cache, shard) for shard in cache.manifest.shards]
    )
    ids = IdsWriter(staging / IDS, schema)
    copy_ids(base.path / IDS, ids)
    actions[IDS] = "the base's rows copied, the new rows appended"
    source = ShardSource(cache, base.manifest.modality, base.grasp, base.coder, old)
    writer.stream(
        engine, source, rows, writers, postings, ids, f"add to {base.name}", progress, UpdateError
    )
    writer.close_streams(writers, postings, ids, rows)
    copy_artifacts(base, writer)
    record = source_record(cache) | {
        # the base's rows keep the base's root; the added rows' must lie under the same one
        "image_root": base.manifest.source.get("image_root") or cache.manifest.image_root,
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
    return writer.finish(new_manifest(base, version, rows, writer, record, "add", actions, started))


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
    writer = VersionWriter(staging)
    for entry in base.manifest.prefixes:
        if entry.store:
            continue  # served from the store, filtered once below
        edited = write_filtered(entry, base.path, staging, new_row)
        writer.record(edited.files, rows)
        actions[entry.file] = edited.action
    if base.store is not None:
        writer.record(write_filtered_store(base.store, keep, staging), rows)
        actions[STORE_VECTORS] = "copied: the kept stored rows"
    crash_point("after-prefix-index")
    base_postings = Postings(base.path)
    paths = filter_postings(base_postings, new_row, staging)
    entries = int(np.load(staging / INDPTR)[-1])
    writer.record_postings(dict.fromkeys(paths), base_postings.concepts, entries)
    actions["postings_*.npy"] = "filtered: the deleted rows' entries dropped, rows renumbered"
    crash_point("after-postings")
    ids = IdsWriter(staging / IDS, unified_schema([pq.read_schema(base.path / IDS)]))
    copy_ids(base.path / IDS, ids, keep)
    writer.record(ids.close(), ids.rows)
    actions[IDS] = "the kept rows copied"
    copy_artifacts(base, writer)
    deleted = len(new_row) - rows
    source = {
        "operation": "delete",
        "rows": rows,
        "deleted_rows": deleted,
        "deleted_ids_sha256": ids_digest,
        "image_root": base.manifest.source.get("image_root"),  # the kept rows' paths' root
        "base": base_reference(base),
        "lineage": lineage(
            base.manifest,
            {"operation": "delete", "version": f"v{version:06d}", "rows": -deleted},
        ),
    }
    return writer.finish(
        new_manifest(base, version, rows, writer, source, "delete", actions, started)
    )


# --- the commands ------------------------------------------------------------------------------


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
    store = BundleStore(config.bundles)
    actions: dict[str, str] = {}
    with running_engine(config.engine, config.ray_address) as engine, store.lock():
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
