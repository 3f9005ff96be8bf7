"""`--engine ray`: the per-shard work of a build (or an add) as Ray tasks.

Past one machine the shard work runs on Ray, an existing distributed engine; the default engine
stays `local` (one process). Each shard's pure step — read the shard, rotate it with the GraSP
artifact, CEDAR-encode it, make its postings run (`indexer.build.shard_step.process_shard`) — is one
Ray task. The driver consumes the results IN SHARD ORDER and feeds them to the same writers as the
local engine, so both engines write the same bytes into every index, postings and ids file
(tests/indexer/build/test_distributed.py compares the checksums).

Where things run:

- tasks read their shard from the cache folder themselves (on a cluster the cache must be on
  storage every node reads at the same path: NFS, a mounted bucket); the artifacts go to the
  object store once (`ray.put`);
- the driver keeps what is sequential: the training sample of IVF/PQ indexes (the first
  shards), the writers, verification and publishing.

Memory: at most `ahead` (default 3) shard results are in flight — the next task is submitted
when the driver takes the oldest result (`ray.get` in shard order), so the object store holds
at most `ahead` + 1 shards' results whatever the cache's size.

Connecting: if Ray is already initialised in this process (a notebook, a test), that session
is used and left running; otherwise `ray.init(address)` — `--ray-address`, else the RAY_ADDRESS
environment variable, else a local Ray started for this job and shut down at its end. Workers
need this package installed. Ray is imported only here, only when `--engine ray` is chosen
(its import and start take seconds).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from indexer.build.shard_step import ShardBatch, ShardSource, process_shard
from training.cedar.concepts import ConceptCoder
from training.core.artifacts import TransformArtifact
from training.core.cache import EmbeddingCache, Shard
from training.core.errors import InputError

log = logging.getLogger(__name__)

IN_FLIGHT = 3


class RayError(InputError):
    """`--engine ray` that cannot run: Ray missing or unreachable, or no shard in flight."""


def shard_task(
    cache: EmbeddingCache,
    shard: Shard,
    modality: str,
    first_row: int,
    grasp: TransformArtifact,
    coder: ConceptCoder,
) -> ShardBatch:
    """What one Ray task does: read one shard and run the pure per-shard step on it."""
    data = cache.read_shard(shard)
    return process_shard(data.embeddings[modality], data.metadata, first_row, grasp, coder)


def import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise RayError(
            "--engine ray needs the ray package: pip install 'strata[distributed]'"
        ) from None
    return ray


class RayEngine:
    """A shard engine (see indexer.build.engines.ShardEngine) that maps `shard_task` over Ray."""

    def __init__(self, address: str | None = None, ahead: int = IN_FLIGHT) -> None:
        if ahead < 1:
            raise RayError(f"at least one shard must be in flight, got {ahead}")
        self.address, self.ahead = address, ahead
        self._ray = import_ray()
        self._started = False

    def connect(self) -> ModuleType:
        """Ray, initialised (joining `address` or starting locally when it is not yet)."""
        ray = self._ray
        if not ray.is_initialized():
            try:
                ray.init(
                    address=self.address,
                    include_dashboard=False,
                    logging_level=logging.WARNING,
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = self.address or "a local Ray"
                message = " ".join(str(exc).split())
                raise RayError(f"cannot start or join {where}: {message}") from None
            self._started = True
        return ray

    def __call__(self, source: ShardSource) -> Iterator[ShardBatch]:
        """The shards' batches in shard order, `ahead` tasks running ahead of the reader."""
        ray = self.connect()
        task = ray.remote(num_cpus=1)(shard_task)
        cache_ref, grasp_ref, coder_ref = (
            ray.put(source.cache),
            ray.put(source.grasp),
            ray.put(source.coder),
        )
        modality, first_row = source.modality, source.first_row
        starts = []
        for shard in source.cache.manifest.shards:
            starts.append((shard, first_row))
            first_row += shard.rows
        todo = iter(starts)
        pending: deque[Any] = deque()

        def submit() -> None:
            item = next(todo, None)
            if item is not None:
                shard, start = item
                pending.append(task.remote(cache_ref, shard, modality, start, grasp_ref, coder_ref))

        try:
            for _ in range(self.ahead):
                submit()
            while pending:
                batch = self._result(pending.popleft())
                submit()  # keep `ahead` tasks busy while the driver writes this one
                yield batch
        finally:
            for ref in pending:
                ray.cancel(ref)

    def _result(self, ref: Any) -> ShardBatch:
        ray = self._ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, InputError):  # a bad shard: the same one-line error as local
                raise cause from None
            raise

    def close(self) -> None:
        """Shut down the Ray this engine started (a session found running is left alone)."""
        if self._started:
            self._ray.shutdown()
            self._started = False
