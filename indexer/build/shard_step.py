"""The pure per-shard step of a build or an add: what one shard contributes, before any I/O.

    x           the shard's embeddings of the gallery modality, float16/32 [n, D]
    z           = (x − mean_G) @ R_Gᵀ                          one matmul (GraSP-VL)
    (c, a)      = the k active concepts of each row (CEDAR)     → the shard's postings run
    metadata    the shard's rows, in order                      → ids.parquet

It is a pure function of a shard, so the engine that maps it over the shards is a choice
(indexer/build/engines.py: local threads, or Ray tasks in indexer/build/distributed.py); the writers
consume its results in shard order (indexer/build/version_writer.py).
"""

from __future__ import annotations

import threading
import weakref
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from indexer.format.codes import check_codable, code_run
from indexer.format.postings import PostingRun
from indexer.format.prefixes import rotate_blocks
from training.cedar.concepts import ConceptCoder
from training.core.artifacts import TransformArtifact
from training.core.cache import EmbeddingCache


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


@dataclass(frozen=True)
class ShardSource:
    """What an engine maps the shard step over: the cache's shards (manifest order), the
    modality read, the two artifacts, and the row number of the first shard's first row."""

    cache: EmbeddingCache
    modality: str
    grasp: TransformArtifact
    coder: ConceptCoder
    first_row: int = 0


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
    (indexer/format/codes.py), refused as `coder.encode` refuses them. With an `executor`, the codes
    are computed there while this thread rotates (the same result, on two cores); with
    `buffers`, the rotated rows are written into pooled memory."""
    x = np.asarray(embeddings)  # float16 or float32: widened block by block where used
    cedar = coder.artifact
    check_codable(x, cedar.dim)
    words = coder.word_margins if coder.readout is not None else None
    out = None if buffers is None else buffers.take(len(x), grasp.dim)
    if executor is None:
        run = code_run(x, cedar.rotation, cedar.mean, coder.k, first_row, words=words)
        return ShardBatch(first_row, rotate_blocks(x, grasp, out=out), metadata, run)
    coding = executor.submit(
        code_run, x, cedar.rotation, cedar.mean, coder.k, first_row, words=words
    )
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
