"""Where the per-shard step runs: `--engine local` (threads of this process) or `ray`.

An engine maps the pure shard step (indexer/build/shard_step.py) over the shards of a `ShardSource`
and yields the batches in shard order; the writers consume them in that order, so every engine
writes the same files. `local_batches` (the default) runs in this process, one shard ahead of
the writers (its rotation and its CEDAR codes on two background threads); `RayEngine`
(indexer/build/distributed.py, imported only when `--engine ray` is chosen) runs Ray tasks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from queue import Empty, Full, Queue
from typing import TypeVar

from indexer.build.shard_step import BufferPool, ShardBatch, ShardSource, process_shard
from training.core.errors import InputError

PREFETCH = 1  # shards the local engine codes ahead of the writers (bounded memory)
ENGINES = ("local", "ray")
T = TypeVar("T")


class EngineError(InputError):
    """An --engine that is not one of ENGINES."""


# a source → its shards' batches, in shard order
ShardEngine = Callable[[ShardSource], Iterable[ShardBatch]]


def local_batches(source: ShardSource) -> Iterator[ShardBatch]:
    """`process_shard` over the source's shards in this process, in order (the local engine).

    Three threads share the work: the caller writes shard i while a background thread rotates
    shard i + 1 (PREFETCH ahead) and a helper thread codes it. Numpy, BLAS, hashing and file
    writes release the GIL, so they run on separate cores; BLAS is held to one thread each
    meanwhile (`single_threaded_blas`), so the three threads share the cores instead of
    oversubscribing them with BLAS's own workers (which spin while they wait)."""

    def batches() -> Iterator[ShardBatch]:
        row = source.first_row
        coder_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="codes")
        buffers = BufferPool(keep=PREFETCH + 3)  # in flight: queued, written, being made
        with single_threaded_blas(), coder_thread as executor:
            for data in source.cache.iter_shards():
                yield process_shard(
                    data.embeddings[source.modality],
                    data.metadata,
                    row,
                    source.grasp,
                    source.coder,
                    executor,
                    buffers,
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
        from indexer.build.distributed import RayEngine

        return RayEngine(address=ray_address)
    raise EngineError(f"unknown --engine {engine!r} ({' | '.join(ENGINES)})")


@contextmanager
def running_engine(engine: str, ray_address: str | None = None) -> Iterator[ShardEngine]:
    """`shard_engine`, closed when the job ends (a Ray the engine started is shut down)."""
    chosen = shard_engine(engine, ray_address)
    try:
        yield chosen
    finally:
        close = getattr(chosen, "close", None)
        if close is not None:
            close()
