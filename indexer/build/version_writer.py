"""Writing one bundle version into its staging folder: its files, their records, its manifest.

Build, add and delete each make a version's files their own way (a pass over a cache, a base
extended by a cache's rows, a base filtered) and write them through one `VersionWriter`, which
owns what every version shares:

- the manifest's `files`: for each file, its sha256 (the digest a writer computed from the bytes
  as they were written, else read back), its size and its row count; the digests computed while
  writing are kept apart (`written`) so that verification need not read those files back;
- the streamed part of a build or an add: the shards' batches (from an engine,
  indexer/build/engines.py) fed in row order to the prefix-index writers, the postings and the ids
  (`write_batches`), then every writer closed and its files recorded, with the crash points
  `after-prefix-index` and `after-postings` (indexer/versions/crashpoints.py);
- the tuning of the approximate indexes' search parameters on the files written
  (`tune`, indexer/format/tuning.py);
- the artifact copies, byte for byte;
- the open vocabulary's gallery state, measured on the version's rows, and the gate on its
  learnt words' postings, which rewrites them (`open_vocabulary`,
  indexer/vocabulary/stored_state.py, indexer/vocabulary/word_gate.py);
- last, manifest.json, then an fsync of every file and folder (`finish`).

The order of the records is the order the files are written, so the same calls write the same
manifest bytes.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from indexer.build.engines import ShardEngine
from indexer.build.shard_step import ShardBatch, ShardSource
from indexer.format.bundle import Bundle
from indexer.format.funnel_plans import FunnelConfig, calibrate_plans, plans_record
from indexer.format.ids import IdsWriter
from indexer.format.manifest import MANIFEST, BundleManifest, FileRecord, PrefixEntry
from indexer.format.postings import CHUNKS, INDPTR, ROWS, VALUES
from indexer.format.postings_writer import PostingsWriter
from indexer.format.prefix_writers import FlatFileWriter, PrefixIndexWriter
from indexer.format.prefixes import ROW_BLOCK
from indexer.format.served_index import open_served
from indexer.format.store import VectorStore
from indexer.format.tuning import RECALL_TARGET, TUNING_QUERIES, tune_prefixes
from indexer.versions.crashpoints import crash_point
from indexer.vocabulary.stored_state import write_state
from indexer.vocabulary.word_gate import MEASURED, GatePlan
from training.core.errors import InputError
from training.core.files import fsync_tree, sha256_file
from training.core.metrics import prefix_vectors

WRITE_THREADS = 2  # threads renormalising, hashing and writing the prefix indexes of a shard


class VersionWriter:
    """The files of one version being written into `staging`, and the steps that write them."""

    def __init__(self, staging: Path) -> None:
        self.staging = staging
        self.work = staging / "work"  # the streaming writers' temporary files
        self.files: dict[str, FileRecord] = {}
        self.written: dict[str, str] = {}  # name → sha256 computed from the bytes as written

    def record(self, digests: Mapping[Path, str | None], rows: int | None) -> None:
        """Files written into staging (path → sha256 when computed while writing, else None,
        and it is read back), each holding `rows` rows (None: not a table of rows)."""
        for path, digest in digests.items():
            name = path.relative_to(self.staging).as_posix()
            self.files[name] = FileRecord(digest or sha256_file(path), path.stat().st_size, rows)
            if digest is not None:
                self.written[name] = digest
            else:  # read back: a file written again (the gated postings) drops its old digest
                self.written.pop(name, None)

    def record_postings(
        self, files: Mapping[Path, str | None], concepts: int, entries: int
    ) -> None:
        """The postings files: indptr holds concepts + 1 offsets, the chunk table a row per
        concept, rows and values one element per entry."""
        counts = {INDPTR: concepts + 1, CHUNKS: concepts, ROWS: entries, VALUES: entries}
        for path, digest in files.items():
            self.record({path: digest}, counts[path.name])

    def copy_artifact(self, copy: str, files: Iterable[Path]) -> None:
        """An artifact's files copied byte for byte into the folder `copy` of the version."""
        folder = self.staging / copy
        folder.mkdir(parents=True)
        for file in files:
            shutil.copyfile(file, folder / file.name)
            self.record({folder / file.name: None}, None)

    def stream(
        self,
        engine: ShardEngine,
        source: ShardSource,
        rows: int,
        writers: Sequence[PrefixIndexWriter],
        postings: PostingsWriter,
        ids: IdsWriter,
        desc: str,
        progress: bool,
        error: type[InputError],
    ) -> None:
        """The source's shards, run on `engine`, written from row `source.first_row` on; the
        version then holds `rows` rows, or `error` says how many the cache yielded."""
        with tqdm(total=source.cache.rows, desc=desc, unit="row", disable=not progress) as bar:
            end = write_batches(
                engine(source), source.first_row, writers, postings, ids, bar.update, error
            )
        if end != rows:
            yielded = end - source.first_row
            raise error(f"the cache yielded {yielded} rows, its manifest lists {rows}")

    def close_streams(
        self,
        writers: Sequence[PrefixIndexWriter],
        postings: PostingsWriter,
        ids: IdsWriter,
        rows: int,
    ) -> int:
        """Close the streamed writers and record their files; returns the postings' entries.

        The prefix indexes are closed one after the other (final writes, merges, fsyncs: mostly
        waiting on the disk) on one thread, while this one merges the postings. The work
        folder, which every writer empties, is removed."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="close") as pool:
            closing = pool.submit(lambda: [writer.close() for writer in writers])
            try:
                postings_files = postings.close()
            finally:
                closed = closing.result()
        for digests in closed:
            self.record(digests, rows)
        crash_point("after-prefix-index")
        entries = int(postings.totals.sum())
        self.record_postings(postings_files, postings.n_concepts, entries)
        crash_point("after-postings")
        self.record(ids.close(), ids.rows)
        self.work.rmdir()
        return entries

    def tune(
        self,
        prefixes: Sequence[PrefixEntry],
        target: float = RECALL_TARGET,
        queries: int = TUNING_QUERIES,
        seed: int = 0,
        store: dict | None = None,
    ) -> tuple[list[PrefixEntry], float]:
        """The entries with every approximate index's search parameters tuned to `target` on the
        written files (indexer/format/tuning.py), and the seconds it took. A prefix that cannot be
        tuned keeps its setting (its record says why). `store`: the manifest's store record, whose
        exact rows the prefixes it serves are read from."""
        started = time.perf_counter()
        shared = None if store is None else VectorStore(self.staging, store)
        indexes = {p.length: open_served(self.staging, p, shared) for p in prefixes}
        tuned = tune_prefixes(indexes, target, queries, seed)
        del indexes, shared
        entries = []
        for p in prefixes:
            tuning = tuned.get(p.length)
            if tuning is None:
                entries.append(replace(p, tuning=None))
                continue
            search = p.search if tuning.status == "untuned" else tuning.chosen
            entries.append(replace(p, search=search, tuning=tuning))
        return entries, round(time.perf_counter() - started, 3)

    def open_vocabulary(
        self,
        manifest: BundleManifest,
        progress: bool = False,
        gate: GatePlan | None = MEASURED,
        known_hubs: np.ndarray | None = None,
    ) -> BundleManifest:
        """The manifest with the open vocabulary's gallery state measured on the files written so
        far (the artifacts copied) and written beside them (indexer/vocabulary/stored_state.py;
        `known_hubs` the base's rows' hub values, carried), the learnt words' postings gated as
        `gate` says (indexer/vocabulary/word_gate.py); its `open_vocabulary` null where the
        version gets none."""
        # the state is measured anew: nothing of a base's (its record, its agreement) is read
        opened = Bundle(
            self.staging, replace(manifest, files=dict(self.files), open_vocabulary=None)
        )
        record, files = write_state(self.staging, opened, progress, gate, known_hubs)
        del opened
        for path, rows in files.items():
            self.record({path: None}, rows)
        postings = {**manifest.postings, "entries": self.files[ROWS].rows}
        return replace(manifest, files=self.files, open_vocabulary=record, postings=postings)

    def funnels(
        self, manifest: BundleManifest, config: FunnelConfig | None = None
    ) -> BundleManifest:
        """The manifest with the funnels "auto" runs, calibrated on the files written so far
        (indexer/format/funnel_plans.py) under `config` (default: the service's), so that a
        replica plans at once when it opens the version."""
        config = config or FunnelConfig()
        started = time.perf_counter()
        opened = Bundle(self.staging, replace(manifest, files=dict(self.files), funnels=None))
        plans = calibrate_plans(opened, config)
        del opened
        record = plans_record(plans, config, time.perf_counter() - started)
        return replace(manifest, funnels=record)

    def finish(self, manifest: BundleManifest) -> BundleManifest:
        """Write manifest.json last, then fsync every file and folder of the version."""
        (self.staging / MANIFEST).write_text(manifest.to_json())
        fsync_tree(self.staging)
        return manifest


def write_batches(
    batches: Iterable[ShardBatch],
    first_row: int,
    writers: Sequence[PrefixIndexWriter],
    postings: PostingsWriter,
    ids: IdsWriter,
    advance: Callable[[int], object],
    error: type[InputError],
) -> int:
    """Feed shard batches, in row order from `first_row`, to the prefix-index writers, the
    postings and the ids; returns the row after the last one written. The batches are closed
    when they are consumed or a write fails (an engine running ahead stops).

    Each prefix index gets its p_L rows (renormalised, hashed, written) on WRITE_THREADS
    threads, longest prefix first, while this thread writes the postings and ids; every write
    of a shard ends before the next shard's begin, so each file is written in row order."""

    def add(writer: PrefixIndexWriter, rotated: np.ndarray) -> None:
        length = writer.plan.length
        if isinstance(writer, FlatFileWriter):  # appends rows: renormalised block by block
            for start in range(0, len(rotated), ROW_BLOCK):
                writer.add(prefix_vectors(rotated[start : start + ROW_BLOCK], length))
        else:  # one add per shard (an on-disk IVF writes a part file per add)
            writer.add(prefix_vectors(rotated, length))

    by_length = sorted(writers, key=lambda w: w.plan.length, reverse=True)
    pool = ThreadPoolExecutor(max_workers=WRITE_THREADS, thread_name_prefix="write")
    try:
        for batch in batches:
            if batch.first_row != first_row:
                raise error(f"shard rows {batch.first_row}.. arrived out of order")
            adding = [pool.submit(add, writer, batch.rotated) for writer in by_length]
            try:
                postings.add(batch.postings)
                ids.add(batch.metadata)
            finally:
                for future in adding:
                    future.result()
            first_row += batch.rows
            advance(batch.rows)
            crash_point("after-first-shard")
    finally:
        pool.shutdown(cancel_futures=True)
        close = getattr(batches, "close", None)
        if close is not None:
            close()
    return first_row
