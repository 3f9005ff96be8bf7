"""`strata index build`: an embedding cache + a GraSP-VL and a CEDAR artifact → a bundle version.

One streaming pass over the cache, shard by shard (memory: one shard, the writers' buffers, and
whatever the chosen index types hold in RAM — see indexer/format/index_plan.py):

    x           the shard's embeddings of the gallery modality, float32 [n, D]
    z           = (x − mean_G) @ R_Gᵀ                          one matmul (GraSP-VL)
    p_L         = z[:, :L] / ‖z[:, :L]‖  for each prefix L      → prefix_{L}.faiss
    (by default a shared store: p_D once as int8 (or float16) + head norms → store_vectors.npy,
     store_norms.npy; a Flat prefix then has no file (`PrefixPlan.store`), and the shortest prefix
     of a large gallery is compressed codes reranked from it; `--store none`: a file a prefix)
    (c, a)      = the k active concepts of each row (CEDAR)     → concept postings
    metadata    the shard's rows, in order                      → ids.parquet

Row r of the bundle is the r-th row of the cache (shards in manifest order); that position is the
FAISS id and the postings' row id. Indexes that need training (IVF, PQ) are trained first on a
reservoir sample of the first shards' rotated rows. The per-shard step (rotation, CEDAR codes and
the shard's postings run: indexer/build/shard_step.py) is a pure function of a shard, so the engine
that runs it is a choice (indexer/build/engines.py): `--engine local` (the default) maps it over the
shards in this process, one shard ahead of the writers (its rotation and its CEDAR codes on two
background threads); `--engine ray` runs it as Ray tasks (indexer/build/distributed.py). Either way
the results are consumed in shard order by the same writers (the prefix indexes of a shard on
WRITE_THREADS threads: indexer/build/version_writer.py), so both engines write the same files.
Numpy, BLAS, hashing and file writes release the GIL, so these threads use the cores; memory stays
bounded by the few shards in flight.
`strata index add` (indexer/update/rows.py) maps it over the shards of the added cache.

Then each approximate index's search parameters are tuned to the recall target on the files written
(indexer/format/tuning.py; the manifest keeps the operating points measured); then: fsync, verify,
rename, switch CURRENT (and announce in Redis with a publisher), retention
(indexer/versions/release.py, indexer/versions/publish.py, indexer/versions/bundle_store.py). The
Flat indexes and the postings are hashed as they are written; verification takes those digests
instead of reading the files back, and checks everything else in full (`strata index verify` reads
every file).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import faiss
import numpy as np
from tqdm import tqdm

from indexer.build.engines import ShardEngine, local_batches, running_engine
from indexer.build.inputs import (
    BuildConfig,
    BuildError,
    BuildInputs,
    artifact_source,
    open_inputs,
    source_record,
)
from indexer.build.sampling import Reservoir
from indexer.build.shard_step import ShardSource
from indexer.build.version_writer import VersionWriter
from indexer.format.ids import IDS, IdsWriter, unified_schema
from indexer.format.index_plan import PrefixPlan
from indexer.format.manifest import ARTIFACT_COPIES, BundleManifest, PrefixEntry
from indexer.format.postings_writer import PostingsWriter
from indexer.format.prefix_writers import gpu_available, open_writer, train_index
from indexer.format.prefixes import rotate_rows
from indexer.format.served_index import default_search_parameters
from indexer.format.store import VECTORS
from indexer.format.store.block_codes import block_ends, block_rotation
from indexer.format.store.writer import StoreWriter, store_record, write_rotation
from indexer.verify.check import verify_bundle
from indexer.versions.bundle_store import BundleStore
from indexer.versions.crashpoints import check_crash_setting
from indexer.versions.publish import Publisher
from indexer.versions.release import release_version
from training.core.artifacts import MANIFEST as ARTIFACT_MANIFEST
from training.core.artifacts import WEIGHTS as ARTIFACT_WEIGHTS
from training.core.metrics import prefix_vectors

log = logging.getLogger(__name__)

SAMPLE_SPAN = 4  # the training reservoir reads the first shards until it has seen 4× its size


@dataclass
class BuildSummary:
    path: Path
    name: str
    rows: int
    shards: int
    seconds: float
    files: dict[str, int]  # relative path -> bytes
    prefixes: list[PrefixEntry]
    removed_versions: list[str] = field(default_factory=list)
    cleaned: list[Path] = field(default_factory=list)
    training_rows: int = 0
    engine: str = "local"
    announced: str | None = None  # where the version was announced (Redis), None: CURRENT only
    vocabulary: dict | None = None  # the manifest's open_vocabulary record (None: none kept)

    @property
    def bytes_on_disk(self) -> int:
        return sum(self.files.values())

    @property
    def rows_per_second(self) -> float:
        return self.rows / max(self.seconds, 1e-9)


def training_sample(
    inputs: BuildInputs, plans: list[PrefixPlan], seed: int, progress: bool
) -> np.ndarray | None:
    """Rotated rows (first max L coordinates) sampled from the first shards, for training."""
    size = max((p.training_rows(inputs.cache.rows) for p in plans), default=0)
    if size == 0:
        return None
    width = max(p.length for p in plans if p.needs_training)
    reservoir = Reservoir(size, width, seed)
    with tqdm(desc="training sample", unit="row", disable=not progress) as bar:
        for data in inputs.cache.iter_shards():
            reservoir.add(rotate_rows(data.embeddings[inputs.modality], inputs.grasp)[:, :width])
            bar.update(data.shard.rows)
            if reservoir.seen >= SAMPLE_SPAN * size:
                break
    return reservoir.sample()


def write_version(
    staging: Path,
    version: int,
    inputs: BuildInputs,
    config: BuildConfig,
    started: float,
    engine: ShardEngine = local_batches,
    written: dict[str, str] | None = None,
) -> BundleManifest:
    """Write every file of a version into `staging` (fsynced) and return its manifest; the
    shards' work runs on `engine`, its results are written in shard order. `written` receives
    the files whose sha256 was computed from the bytes as they were written (name → digest),
    for verification; the other files' digests are read back."""
    cache, rows = inputs.cache, inputs.cache.rows
    writer = VersionWriter(staging)
    writer.work.mkdir()
    sample = training_sample(inputs, inputs.plans, config.seed, config.progress)
    trained = {
        p.length: train_index(p, prefix_vectors(sample, p.length))
        for p in inputs.plans
        if p.needs_training and sample is not None
    }
    served = {p.length for p in inputs.plans if p.store}
    writers: list = [
        open_writer(p, staging, rows, writer.work, trained.get(p.length))
        for p in inputs.plans
        if p.length not in served
    ]
    lengths = [p.length for p in inputs.plans]
    rotated = config.store == "int8"  # int8 codes rotated blocks (indexer/format/store/)
    dim = inputs.grasp.dim
    ends = block_ends(lengths, dim)
    layout = config.store_layout if rotated else "rows"  # int8: one file a block by default
    store = (
        None
        if config.store == "none"
        else store_record(
            config.store,
            lengths,
            on_disk=config.store_on_disk,
            rotated=rotated,
            blocks=ends if layout == "blocks" else None,
        )
    )
    if store is not None:
        rotation = block_rotation(ends, config.seed) if rotated else None
        writers.append(
            StoreWriter(staging, rows, dim, lengths, config.store, rotation=rotation, layout=layout)
        )
        if rotation is not None:
            writer.record(write_rotation(staging, rotation), None)
    n_concepts = inputs.coder.concepts  # 2D signed axes, then the readout's words
    postings = PostingsWriter(staging, writer.work, n_concepts, rows=rows)
    schema = unified_schema(cache.metadata_schema(shard) for shard in cache.manifest.shards)
    ids = IdsWriter(staging / IDS, schema)
    source = ShardSource(cache, inputs.modality, inputs.grasp, inputs.coder, 0)
    writer.stream(
        engine,
        source,
        rows,
        writers,
        postings,
        ids,
        f"index {staging.name}",
        config.progress,
        BuildError,
    )
    entries = writer.close_streams(writers, postings, ids, rows)
    prefixes, tuning_seconds = writer.tune(
        [
            PrefixEntry(
                length=p.length,
                granularity=p.granularity.value,
                file=VECTORS if p.length in served else p.file,
                factory=p.factory,
                kind=p.kind,
                ondisk=p.ondisk,
                search=default_search_parameters(p.factory, p.length),
                reason=p.reason,
                store=p.store,
                rerank=p.rerank,
            )
            for p in inputs.plans
        ],
        config.recall_target,
        config.tuning_queries,
        config.seed,
        store,
    )
    artifacts = {}
    for role, path, artifact in (
        ("grasp", config.grasp, inputs.grasp),
        ("cedar", config.cedar, inputs.cedar),
    ):
        artifacts[role] = artifact_source(path, artifact, role)
        writer.copy_artifact(
            ARTIFACT_COPIES[role], (path / name for name in (ARTIFACT_MANIFEST, ARTIFACT_WEIGHTS))
        )
    manifest = writer.open_vocabulary(
        BundleManifest(
            version=version,
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            encoder=cache.manifest.encoder or inputs.grasp.encoder,
            modality=inputs.modality,
            dim=inputs.grasp.dim,
            k=inputs.coder.k,
            rows=rows,
            contract={g.value: n for g, n in inputs.grasp.contract.items()},
            source=source_record(cache),
            artifacts=artifacts,
            prefixes=prefixes,
            postings={"concepts": n_concepts, "entries": entries, "k": inputs.coder.k},
            files=writer.files,
            store=store,
            build={
                "seconds": round(time.perf_counter() - started, 3),
                "tuning_seconds": tuning_seconds,
                "recall_target": config.recall_target,
                "memory_budget": config.memory_budget,
                "faiss": faiss.__version__,
                "gpu": gpu_available(),
                "training_rows": 0 if sample is None else len(sample),
                "seed": config.seed,
                "engine": config.engine,
            },
        ),
        config.progress,
    )
    if written is not None:  # after the gate, which writes the postings again
        written.update(writer.written)
    return writer.finish(writer.funnels(manifest))


def build_bundle(
    config: BuildConfig,
    on_published: Callable[[Path], None] | None = None,
    publisher: Publisher | None = None,
) -> BuildSummary:
    """Build, verify and publish a new version under `config.out`; see the module docstring.

    With a `publisher` (indexer/versions/publish.py: Redis), it is checked before any work and the
    version is recorded and announced under its lock as CURRENT moves. `on_published(path)`
    runs right after that, before retention, with the build lock still held."""
    check_crash_setting()
    started = time.perf_counter()
    inputs = open_inputs(config)
    for plan in inputs.plans:
        log.info(
            "prefix %d (%s): %s — %s",
            plan.length,
            plan.granularity.value,
            plan.factory,
            plan.reason,
        )
    if publisher is not None:
        publisher.check()
    store = BundleStore(config.out)
    written: dict[str, str] = {}  # digests computed while writing, which verify need not redo
    with running_engine(config.engine, config.ray_address) as engine, store.lock():
        release = release_version(
            store,
            lambda staging, version: write_version(
                staging, version, inputs, config, started, engine, written
            ),
            lambda staging: verify_bundle(
                staging, cache_dir=config.cache, sample=config.verify_sample, written=written
            ),
            config.keep,
            publisher,
            on_published,
        )
    return BuildSummary(
        path=release.path,
        name=release.name,
        rows=release.manifest.rows,
        shards=len(inputs.cache.manifest.shards),
        seconds=time.perf_counter() - started,
        files=release.files,
        prefixes=release.manifest.prefixes,
        removed_versions=release.removed,
        cleaned=release.cleaned,
        training_rows=release.manifest.build["training_rows"],
        engine=config.engine,
        announced=release.announced,
        vocabulary=release.manifest.open_vocabulary,
    )
