"""`strata index build`: an embedding cache + a GraSP-VL and a CEDAR artifact → a bundle version.

One streaming pass over the cache, shard by shard (memory: one shard, the writers' buffers, and
whatever the chosen index types hold in RAM — see indexer/index_plan.py):

    x           the shard's embeddings of the gallery modality, float32 [n, D]
    z           = (x − mean_G) @ R_Gᵀ                          one matmul (GraSP-VL)
    p_L         = z[:, :L] / ‖z[:, :L]‖  for each prefix L      → prefix_{L}.faiss
    (c, a)      = the k active concepts of each row (CEDAR)     → concept postings
    metadata    the shard's rows, in order                      → ids.parquet

Row r of the bundle is the r-th row of the cache (shards in manifest order); that position is
the FAISS id and the postings' row id. Indexes that need training (IVF, PQ) are trained first
on a reservoir sample of the first shards' rotated rows. The per-shard step (`process_shard`:
rotation, CEDAR codes and the shard's postings run, indexer/codes.py) is a pure function of a
shard, so the engine that runs it is a choice: `--engine local` (the default) maps it over the
shards in this process, one shard ahead of the writers (its rotation and its CEDAR codes on two
background threads); `--engine ray` runs it as Ray tasks (indexer/distributed.py). Either way
the results are consumed in shard order by the same writers (the prefix indexes of a shard on
WRITE_THREADS threads), so both engines write the same files. Numpy, BLAS, hashing and file
writes release the GIL, so these threads use the cores; memory stays bounded by the few
shards in flight.
`strata index add` (indexer/update.py) maps it over the shards of the added cache.

Then: fsync, verify, rename, switch CURRENT (and announce in Redis with a publisher), retention
(indexer/release.py, indexer/publish.py, indexer/versions.py). The Flat indexes and the
postings are hashed as they are written; verification takes those digests instead of reading
the files back, and checks everything else in full (`strata index verify` reads every file).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from queue import Empty, Full, Queue
from typing import TypeVar

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from indexer.bundle import (
    ARTIFACT_COPIES,
    MANIFEST,
    ArtifactSource,
    BundleManifest,
    FileRecord,
    PrefixEntry,
)
from indexer.codes import check_codable, code_run
from indexer.crashpoints import check_crash_setting, crash_point
from indexer.ids import IDS, IdsWriter, unified_schema
from indexer.index_plan import RULES, IndexRule, PrefixPlan, parse_index_types, plan_indexes
from indexer.postings import INDPTR, ROWS, VALUES, PostingRun, PostingsWriter
from indexer.prefix_index import (
    FlatFileWriter,
    PrefixIndexWriter,
    default_search_parameters,
    gpu_available,
    open_writer,
    train_index,
)
from indexer.prefixes import ROW_BLOCK, rotate_blocks, rotate_rows
from indexer.publish import Publisher
from indexer.release import release_version
from indexer.sampling import Reservoir
from indexer.verify import verify_bundle
from indexer.versions import BundleStore
from training.cedar.concepts import ConceptCoder
from training.core.artifacts import MANIFEST as ARTIFACT_MANIFEST
from training.core.artifacts import WEIGHTS as ARTIFACT_WEIGHTS
from training.core.artifacts import TransformArtifact
from training.core.cache import MANIFEST as CACHE_MANIFEST
from training.core.cache import EmbeddingCache, Shard
from training.core.errors import InputError
from training.core.files import fsync_tree, sha256_file
from training.core.metrics import prefix_vectors

log = logging.getLogger(__name__)

SAMPLE_SPAN = 4  # the training reservoir reads the first shards until it has seen 4× its size
PREFETCH = 1  # shards the local engine codes ahead of the writers (bounded memory)
WRITE_THREADS = 2  # threads renormalising, hashing and writing the prefix indexes of a shard
ENGINES = ("local", "ray")
T = TypeVar("T")


class BuildError(InputError):
    """Inputs the build cannot use (named), or a written version that failed verification."""


@dataclass(frozen=True)
class BuildConfig:
    cache: Path
    grasp: Path
    cedar: Path
    out: Path
    modality: str | None = None  # default: image when the cache has it, else its modality
    memory_budget: int = 4 * 2**30  # per prefix index, see index_plan.RULES
    index_types: tuple[str, ...] = ()  # "PREFIX=FACTORY" overrides
    keep: int = 3
    progress: bool = True
    seed: int = 0
    verify_sample: int = 64
    rules: tuple[IndexRule, ...] = RULES
    engine: str = "local"  # where the per-shard work runs: local | ray
    ray_address: str | None = None  # --engine ray: a cluster to join (default: RAY_ADDRESS/local)


@dataclass
class BuildInputs:
    """The validated inputs of a build."""

    cache: EmbeddingCache
    modality: str
    grasp: TransformArtifact
    cedar: TransformArtifact
    coder: ConceptCoder
    plans: list[PrefixPlan]


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

    @property
    def bytes_on_disk(self) -> int:
        return sum(self.files.values())

    @property
    def rows_per_second(self) -> float:
        return self.rows / max(self.seconds, 1e-9)


@dataclass
class ShardBatch:
    """What one shard contributes, before any I/O: rotated rows, the postings run of its CEDAR
    codes, metadata."""

    first_row: int
    rotated: np.ndarray  # float32 [n, D], z = (x − mean) @ Rᵀ
    metadata: pa.Table
    postings: PostingRun  # the shard's rows' postings (rows first_row, ...)

    @property
    def rows(self) -> int:
        return len(self.rotated)


# (cache, modality, grasp, coder, first row number) → the shards' batches, in shard order
ShardEngine = Callable[
    [EmbeddingCache, str, TransformArtifact, ConceptCoder, int], Iterable[ShardBatch]
]


def process_shard(
    embeddings: np.ndarray,
    metadata: pa.Table,
    first_row: int,
    grasp: TransformArtifact,
    coder: ConceptCoder,
    executor: Executor | None = None,
    buffers: BufferPool | None = None,
) -> ShardBatch:
    """The pure per-shard step: one GraSP matmul, and the postings run of the CEDAR codes of
    the shard's rows — the concepts and activations `coder.encode` gives, coded in blocks
    (indexer/codes.py), refused as `coder.encode` refuses them. With an `executor`, the codes
    are computed there while this thread rotates (the same result, on two cores); with
    `buffers`, the rotated rows are written into pooled memory."""
    x = np.asarray(embeddings)  # float16 or float32: widened block by block where used
    cedar = coder.artifact
    check_codable(x, cedar.dim)
    out = None if buffers is None else buffers.take(len(x), grasp.dim)
    if executor is None:
        run = code_run(x, cedar.rotation, cedar.mean, coder.k, first_row)
        return ShardBatch(first_row, rotate_blocks(x, grasp, out=out), metadata, run)
    coding = executor.submit(code_run, x, cedar.rotation, cedar.mean, coder.k, first_row)
    try:
        rotated = rotate_blocks(x, grasp, out=out)
    finally:
        run = coding.result()
    return ShardBatch(first_row, rotated, metadata, run)


class BufferPool:
    """float32 arrays over memory that is reused once no array uses it any more.

    `take(rows, dim)` returns a new array over a free buffer of that size (else a new one).
    The buffer goes back to the pool when the last array viewing it — the one returned, or any
    slice or view of it — is garbage collected. So a shard's rotated rows land in memory a
    written shard has left, already paged in (a fresh 100 MB array per shard costs page
    faults, and their kernel locks, on every shard); a consumer that keeps its batches only
    makes the pool allocate more. At most `keep` free buffers are kept."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._free: list[bytearray] = []
        self._lock = threading.RLock()  # a finalizer may run inside `take` (a GC pass)

    def take(self, rows: int, dim: int) -> np.ndarray:
        size = rows * dim * np.dtype(np.float32).itemsize
        raw = None
        with self._lock:
            for at, free in enumerate(self._free):
                if len(free) == size:
                    raw = self._free.pop(at)
                    break
        if raw is None:
            raw = bytearray(size)
        root = np.frombuffer(raw, dtype=np.float32)  # every view of it keeps `root` alive
        weakref.finalize(root, self._give_back, raw)
        return root.reshape(rows, dim)

    @property
    def free(self) -> int:
        return len(self._free)

    def _give_back(self, raw: bytearray) -> None:
        with self._lock:
            if len(self._free) < self.keep:
                self._free.append(raw)


def local_batches(
    cache: EmbeddingCache,
    modality: str,
    grasp: TransformArtifact,
    coder: ConceptCoder,
    first_row: int = 0,
) -> Iterator[ShardBatch]:
    """`process_shard` over the cache's shards in this process, in order (the local engine);
    the first shard's rows are numbered from `first_row`.

    Three threads share the work: the caller writes shard i while a background thread rotates
    shard i + 1 (PREFETCH ahead) and a helper thread codes it. Numpy, BLAS, hashing and file
    writes release the GIL, so they run on separate cores; BLAS is held to one thread each
    meanwhile (`single_threaded_blas`), so the three threads share the cores instead of
    oversubscribing them with BLAS's own workers (which spin while they wait)."""

    def batches() -> Iterator[ShardBatch]:
        row = first_row
        coder_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="codes")
        buffers = BufferPool(keep=PREFETCH + 3)  # in flight: queued, written, being made
        with single_threaded_blas(), coder_thread as executor:
            for data in cache.iter_shards():
                yield process_shard(
                    data.embeddings[modality], data.metadata, row, grasp, coder, executor, buffers
                )
                row += data.shard.rows

    return prefetched(batches(), PREFETCH)


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Every BLAS call of the process runs on one thread while the context lasts (threadpoolctl;
    a no-op where it is not installed); the previous setting is restored after."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def prefetched(items: Iterable[T], depth: int) -> Iterator[T]:
    """`items`, produced in a background thread (started at the first `next`) at most `depth`
    items ahead of the consumer.

    The producer's exception is raised to the consumer at its place in the sequence; closing
    this generator (or dropping it) stops the producer after the item it is making."""
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    queue: Queue[tuple[bool, object]] = Queue(maxsize=depth)
    stop = threading.Event()

    def offer(entry: tuple[bool, object]) -> bool:
        while not stop.is_set():
            try:
                queue.put(entry, timeout=0.1)
            except Full:
                continue
            return True
        return False

    def produce() -> None:
        iterator = iter(items)
        try:
            for item in iterator:
                if not offer((False, item)):
                    return
        except BaseException as exc:  # handed to the consumer, raised there
            offer((True, exc))
            return
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:  # a generator's cleanup runs here, in its own thread
                close()
        offer((True, None))

    thread = threading.Thread(target=produce, name="prefetch", daemon=True)
    thread.start()
    try:
        while True:
            last, value = queue.get()
            if last:
                if isinstance(value, BaseException):
                    raise value
                return
            yield value  # type: ignore[misc]
    finally:
        stop.set()
        while True:  # unblock a producer waiting to put, then wait for it
            try:
                queue.get_nowait()
            except Empty:
                break
        thread.join()


def shard_engine(engine: str, ray_address: str | None = None) -> ShardEngine:
    """The engine a build or add runs its shards on (the Ray module is imported only here)."""
    if engine == "local":
        return local_batches
    if engine == "ray":
        from indexer.distributed import RayEngine

        return RayEngine(address=ray_address)
    raise BuildError(f"unknown --engine {engine!r} ({' | '.join(ENGINES)})")


# --- inputs -----------------------------------------------------------------------------------


def load_artifact(path: Path, role: str) -> TransformArtifact:
    try:
        return TransformArtifact.load(path)
    except InputError as exc:
        raise BuildError(f"--{role} {path}: {exc}") from None


def open_inputs(config: BuildConfig) -> BuildInputs:
    """Open and cross-check the cache and both artifacts; plan the indexes. Every refusal is a
    BuildError (or another InputError) that names the input at fault."""
    cache = EmbeddingCache.open(config.cache)
    if cache.rows == 0:
        raise BuildError(f"the embedding cache {config.cache} holds no rows")
    modality = config.modality or ("image" if "image" in cache.modalities else cache.modalities[0])
    if modality not in cache.modalities:
        raise BuildError(
            f"the cache {config.cache} has no {modality} embeddings ({', '.join(cache.modalities)})"
        )
    grasp = load_artifact(config.grasp, "grasp")
    cedar = load_artifact(config.cedar, "cedar")
    if grasp.method == "cedar":
        raise BuildError(
            f"--grasp {config.grasp} is a CEDAR artifact; pass it as --cedar, and a GraSP-VL "
            "artifact as --grasp"
        )
    if cedar.method != "cedar":
        raise BuildError(
            f"--cedar {config.cedar} is a {cedar.method!r} artifact, not a CEDAR one "
            "(method 'cedar'); a GraSP-VL artifact goes to --grasp"
        )
    for role, artifact, path in (("grasp", grasp, config.grasp), ("cedar", cedar, config.cedar)):
        if artifact.dim != cache.dim:
            raise BuildError(
                f"dimension mismatch: the cache {config.cache} holds {cache.dim}-d embeddings, "
                f"the --{role} artifact {path} is {artifact.dim}-d"
            )
        encoder = cache.manifest.encoder
        if artifact.encoder and encoder and artifact.encoder != encoder:
            raise BuildError(
                f"encoder mismatch: the cache {config.cache} was embedded with {encoder!r}, "
                f"the --{role} artifact {path} was trained on {artifact.encoder!r}"
            )
    try:
        coder = ConceptCoder(cedar)
    except InputError as exc:
        raise BuildError(f"--cedar {config.cedar}: {exc}") from None
    if config.keep < 1:
        raise BuildError(f"--keep must be at least 1, got {config.keep}")
    if config.engine not in ENGINES:
        raise BuildError(f"unknown --engine {config.engine!r} ({' | '.join(ENGINES)})")
    overrides = parse_index_types(config.index_types, grasp.contract)
    plans = plan_indexes(cache.rows, grasp.contract, config.memory_budget, overrides, config.rules)
    return BuildInputs(cache, modality, grasp, cedar, coder, plans)


def source_record(cache: EmbeddingCache) -> dict:
    manifest = cache.root / CACHE_MANIFEST
    return {
        "cache": str(cache.root.resolve()),
        "cache_manifest_sha256": sha256_file(manifest) if manifest.is_file() else None,
        "cache_format": cache.manifest.source,
        "rows": cache.rows,
        "shards": len(cache.manifest.shards),
    }


def artifact_source(path: Path, artifact: TransformArtifact, role: str) -> ArtifactSource:
    return ArtifactSource(
        path=str(path.resolve()),
        method=artifact.method,
        manifest_sha256=sha256_file(path / ARTIFACT_MANIFEST),
        weights_sha256=sha256_file(path / ARTIFACT_WEIGHTS),
        copy=ARTIFACT_COPIES[role],
    )


# --- the pass over the cache ------------------------------------------------------------------


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
    work = staging / "work"
    work.mkdir()
    sample = training_sample(inputs, inputs.plans, config.seed, config.progress)
    trained = {
        p.length: train_index(p, prefix_vectors(sample, p.length))
        for p in inputs.plans
        if p.needs_training and sample is not None
    }
    writers = [open_writer(p, staging, rows, work, trained.get(p.length)) for p in inputs.plans]
    n_concepts = 2 * inputs.grasp.dim
    postings = PostingsWriter(staging, work, n_concepts)
    schema = unified_schema(metadata_schema(cache, shard) for shard in cache.manifest.shards)
    ids = IdsWriter(staging / IDS, schema)

    with tqdm(
        total=rows, desc=f"index {staging.name}", unit="row", disable=not config.progress
    ) as bar:
        batches = engine(cache, inputs.modality, inputs.grasp, inputs.coder, 0)
        first_row = write_batches(batches, 0, writers, postings, ids, bar.update, BuildError)
    if first_row != rows:
        raise BuildError(f"the cache yielded {first_row} rows, its manifest lists {rows}")

    files: dict[str, FileRecord] = {}

    def record(digests: Mapping[Path, str | None], count: int | None) -> None:
        for path, digest in digests.items():
            name = path.relative_to(staging).as_posix()
            files[name] = FileRecord(digest or sha256_file(path), path.stat().st_size, count)
            if digest is not None and written is not None:
                written[name] = digest

    # the prefix indexes are closed one after the other (final writes, merges, fsyncs: mostly
    # waiting on the disk) on one thread, while this one merges the postings
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="close") as pool:
        closing = pool.submit(lambda: [writer.close() for writer in writers])
        try:
            postings_files = postings.close()
        finally:
            closed = closing.result()
    for digests in closed:
        record(digests, rows)
    crash_point("after-prefix-index")
    entries = int(postings.totals.sum())
    counts = {INDPTR: n_concepts + 1, ROWS: entries, VALUES: entries}
    for path, digest in postings_files.items():
        record({path: digest}, counts[path.name])
    crash_point("after-postings")
    record(ids.close(), ids.rows)
    artifacts = {}
    for role, path, artifact in (
        ("grasp", config.grasp, inputs.grasp),
        ("cedar", config.cedar, inputs.cedar),
    ):
        artifacts[role] = artifact_source(path, artifact, role)
        copy = staging / ARTIFACT_COPIES[role]
        copy.mkdir(parents=True)
        for name in (ARTIFACT_MANIFEST, ARTIFACT_WEIGHTS):
            shutil.copyfile(path / name, copy / name)
            record({copy / name: None}, None)
    work.rmdir()  # every writer removed its work files

    manifest = BundleManifest(
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
        prefixes=[
            PrefixEntry(
                length=p.length,
                granularity=p.granularity.value,
                file=p.file,
                factory=p.factory,
                kind=p.kind,
                ondisk=p.ondisk,
                search=default_search_parameters(p.factory, p.length),
                reason=p.reason,
            )
            for p in inputs.plans
        ],
        postings={"concepts": n_concepts, "entries": entries, "k": inputs.coder.k},
        files=files,
        build={
            "seconds": round(time.perf_counter() - started, 3),
            "memory_budget": config.memory_budget,
            "faiss": faiss.__version__,
            "gpu": gpu_available(),
            "training_rows": 0 if sample is None else len(sample),
            "seed": config.seed,
            "engine": config.engine,
        },
    )
    (staging / MANIFEST).write_text(manifest.to_json())
    fsync_tree(staging)
    return manifest


def metadata_schema(cache: EmbeddingCache, shard: Shard) -> pa.Schema:
    """A shard's metadata schema from its parquet footer (plus `id`, which the reader adds when
    a clip-retrieval cache lacks it)."""
    relative = shard.path("metadata")
    if relative is None:
        raise BuildError(f"shard {shard.index} of {cache.root} has no metadata file")
    try:
        schema = pq.read_schema(cache.root / relative)
    except (OSError, pa.ArrowInvalid) as exc:
        raise BuildError(f"cannot read {cache.root / relative}: {exc}") from None
    return schema if "id" in schema.names else schema.append(pa.field("id", pa.string()))


# --- the whole build --------------------------------------------------------------------------


def build_bundle(
    config: BuildConfig,
    on_published: Callable[[Path], None] | None = None,
    publisher: Publisher | None = None,
) -> BuildSummary:
    """Build, verify and publish a new version under `config.out`; see the module docstring.

    With a `publisher` (indexer/publish.py: Redis), it is checked before any work and the
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
    engine = shard_engine(config.engine, config.ray_address)
    store = BundleStore(config.out)
    written: dict[str, str] = {}  # digests computed while writing, which verify need not redo
    try:
        with store.lock():
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
    finally:
        close = getattr(engine, "close", None)
        if close is not None:
            close()
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
    )


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
