"""The files of a version made by `strata index add | delete` (the commands:
indexer/update/rows.py): the base's rows with the new ones appended, or without the deleted
ones, the artifacts copied, the approximate indexes re-tuned, and the manifest that records the
base and the lineage of operations since the last build."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pyarrow.parquet as pq

from indexer.build.engines import ShardEngine
from indexer.build.inputs import source_record
from indexer.build.shard_step import ShardSource
from indexer.build.version_writer import VersionWriter
from indexer.format.bundle import Bundle
from indexer.format.ids import IDS, IdsWriter, copy_ids, unified_schema
from indexer.format.manifest import MANIFEST, BundleManifest
from indexer.format.postings import INDPTR, ROWS, Postings
from indexer.format.postings_writer import PostingsWriter, filter_postings
from indexer.format.store.block_layout import codes_label
from indexer.format.store.writer import StoreWriter, write_filtered_store, write_rotation
from indexer.format.tuning import RECALL_TARGET
from indexer.update.index_edit import open_extended, write_filtered
from indexer.update.row_changes import (
    UpdateError,
)
from indexer.versions.crashpoints import crash_point
from indexer.vocabulary.stored_state import carried_hubs, kept_gate
from indexer.vocabulary.word_gate import GatePlan
from training.core.cache import EmbeddingCache
from training.core.files import sha256_file


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
    progress: bool = False,
    kept: np.ndarray | None = None,
) -> BundleManifest:
    """The base's manifest for the new version: its rows, source, files, its approximate
    indexes re-tuned to the base's recall target on the new version's rows (their recall at a
    fixed setting changes with the rows they hold), the open vocabulary's state measured on
    them (`progress`: its bar), each of the base's rows carrying its hub value and its gated
    postings (`kept`: the base's rows the new version keeps, for a delete; None: every one, then
    the rows past them, an add's, gated at the base's kept cuts: indexer/vocabulary/word_gate.py),
    and how it was made."""
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
    written = writer.open_vocabulary(
        replace(
            manifest,
            version=version,
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            rows=rows,
            source=source,
            prefixes=prefixes,
            postings={**manifest.postings, "entries": writer.files[ROWS].rows},
            files=writer.files,
            build={"faiss": faiss.__version__, "gpu": False, "training_rows": 0, **build},
        ),
        progress,
        base_gate(base, base.rows if kept is None else rows),
        carried_hubs(base, kept),
    )
    if written.open_vocabulary is not None:
        actions["vocabulary_*"] = (
            "the open vocabulary's state measured again on the new rows (the base's rows' hub "
            "values carried)"
        )
        gate = written.open_vocabulary.get("gate")
        if gate and gate["entries_removed"]:
            actions["postings_*.npy"] += (
                f"; {gate['entries_removed']:,} word entries of the new rows gated out"
            )
    actions["funnels"] = "the funnels auto runs calibrated again on the new rows"
    written = writer.funnels(written)  # the base's record is of its rows
    written.build["actions"] = dict(actions)
    return written


def base_gate(base: Bundle, from_row: int) -> GatePlan | None:
    """The base's kept gate cuts, applied to the rows from `from_row` on; None (no gate) where
    the base kept none."""
    cuts = kept_gate(base)
    return None if cuts is None else GatePlan(cuts, from_row)


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
        if shared.rotation is not None:
            writer.record(write_rotation(staging, shared.rotation), None)
        action = "copied + extended: the stored rows, then the new ones"
        actions[codes_label(shared.layout)] = action
    postings = PostingsWriter(
        staging, writer.work, base.coder.concepts, base=Postings(base.path), rows=rows
    )
    actions["postings_*.npy"] = "merged: the base's CSR, then the new rows' runs"
    schema = unified_schema(
        [pq.read_schema(base.path / IDS)]
        + [cache.metadata_schema(shard) for shard in cache.manifest.shards]
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
    return writer.finish(
        new_manifest(base, version, rows, writer, record, "add", actions, started, progress)
    )


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
        if base.store.rotation is not None:
            writer.record(write_rotation(staging, base.store.rotation), None)
        actions[codes_label(base.store.layout)] = "copied: the kept stored rows"
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
        new_manifest(base, version, rows, writer, source, "delete", actions, started, kept=keep)
    )
