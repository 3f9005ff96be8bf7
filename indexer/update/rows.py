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
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from pydantic import ConfigDict

from indexer.build.engines import running_engine
from indexer.format.bundle import Bundle
from indexer.format.ids import IDS, read_ids
from indexer.format.index_plan import plan_indexes
from indexer.update.row_changes import (
    cache_ids,
    check_addable,
    check_new_ids,
    open_base,
    rows_to_delete,
)
from indexer.update.writing import write_added, write_deleted
from indexer.verify.check import verify_bundle
from indexer.versions.bundle_store import BundleStore
from indexer.versions.crashpoints import check_crash_setting
from indexer.versions.publish import Publisher
from indexer.versions.release import Release, release_version
from training.core.cache import EmbeddingCache
from training.core.config import ConfigModel


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


def replan_notes(base: Bundle, rows: int) -> list[str]:
    """Where a build of `rows` rows would choose another index than the base's (rule-chosen
    prefixes only; --index-type overrides are the user's)."""
    budget = int(base.manifest.build.get("memory_budget", 4 * 2**30))
    stored = base.manifest.store is not None
    planned = {p.length: p for p in plan_indexes(rows, base.contract, budget, store=stored)}
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
