"""Micro-batching: concurrent queries become one call of a blocking batch function.

Each `submit(item)` waits in a bounded queue; one worker task takes the oldest waiting items,
up to `max_batch`, as soon as either `max_batch` are waiting or the oldest has waited
`max_wait_ms`, and runs `process(items)` on an executor thread (the encoder and FAISS are
blocking), then hands each caller its own result — or its own exception, so that one bad
image fails one query, not its batch. While a batch runs, new arrivals queue up for the next.
The default wait is 0: a query that finds the engine idle runs at once (no latency added at low
load), and under load batches still form from the queries that arrive while one runs — on two
CPU cores the 2 ms wait cost 25 % of the latency at concurrency 1 and bought no throughput at
32 (`python -m service.benchmarks.load --max-wait-ms 2`). A wait pays where a batch costs
little more than one query, as on a GPU.

A full queue (`max_queue` items waiting, not counting the batch being processed) refuses the
submission at once with `OverloadedError` rather than letting latency grow without bound.
A submission may carry a deadline (event-loop time): one still waiting when it passes is dropped
with `DeadlineError` instead of being processed for a caller that no longer waits.
With batching switched off (`enabled=False`, for load tests) every submission is processed
alone, on the same executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Generic, TypeVar

from service.errors import DeadlineError, OverloadedError
from training.errors import InputError

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class BatchingConfig:
    """`max_batch` items per call, `max_wait_ms` at most of waiting for company, `max_queue`
    items waiting at most; `enabled=False` processes every item alone."""

    enabled: bool = True
    max_batch: int = 32
    max_wait_ms: float = 0.0
    max_queue: int = 1024

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise InputError(f"max batch must be at least 1, got {self.max_batch}")
        if not 0 <= self.max_wait_ms <= 10_000:
            raise InputError(f"max wait must lie in [0, 10000] ms, got {self.max_wait_ms}")
        if self.max_queue < 1:
            raise InputError(f"max queue must be at least 1, got {self.max_queue}")


@dataclass
class BatchStats:
    """Counters for tests and logs: calls of `process`, items processed, the largest batch."""

    batches: int = 0
    items: int = 0
    largest: int = 0
    expired: int = 0  # dropped unprocessed: their deadline passed while they waited

    def add(self, size: int) -> None:
        self.batches += 1
        self.items += size
        self.largest = max(self.largest, size)


@dataclass
class _Waiting(Generic[T, R]):
    item: T
    future: asyncio.Future[R]
    arrived: float
    deadline: float | None = None


class MicroBatcher(Generic[T, R]):
    """Batches concurrent `submit` calls into `process(items) -> results` calls (one result or
    exception per item, in order). Use from one event loop; `close()` when done."""

    def __init__(
        self,
        process: Callable[[list[T]], Sequence[R | BaseException]],
        config: BatchingConfig | None = None,
        executor: Executor | None = None,
    ) -> None:
        self.process = process
        self.config = config or BatchingConfig()
        self.executor = executor
        self.stats = BatchStats()
        self._waiting: deque[_Waiting[T, R]] = deque()
        self._in_flight: list[_Waiting[T, R]] = []
        self._arrived: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def waiting(self) -> int:
        """Items queued and not yet taken into a batch."""
        return len(self._waiting)

    async def submit(self, item: T, deadline: float | None = None) -> R:
        """The result of `process` for this item (its exception is raised here). `deadline`:
        the event-loop time after which the item is dropped unprocessed (DeadlineError)."""
        if self._closed:
            raise OverloadedError("the server is shutting down")
        loop = asyncio.get_running_loop()
        if deadline is not None and deadline <= loop.time():
            self.stats.expired += 1
            raise DeadlineError("the deadline passed before the query was queued")
        if not self.config.enabled:
            results = await loop.run_in_executor(self.executor, self._call, [item])
            return _unwrap(results[0])
        if len(self._waiting) >= self.config.max_queue:
            raise OverloadedError(
                f"the query queue is full ({self.config.max_queue} waiting); retry later"
            )
        self._start(loop)
        future: asyncio.Future[R] = loop.create_future()
        waiting = _Waiting(item, future, loop.time(), deadline)
        self._waiting.append(waiting)
        assert self._arrived is not None
        self._arrived.set()
        try:
            return await future
        except asyncio.CancelledError:  # the caller gave up (a deadline, a cancelled call):
            with contextlib.suppress(ValueError):  # its place in the queue is free at once
                self._waiting.remove(waiting)
            raise

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._worker is None or self._worker.done():
            self._arrived = asyncio.Event()
            self._worker = loop.create_task(self._run(), name="strata-batcher")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._arrived is not None
        wait = self.config.max_wait_ms / 1000
        while True:
            while not self._waiting:
                self._arrived.clear()
                await self._arrived.wait()
            deadline = self._waiting[0].arrived + wait
            while len(self._waiting) < self.config.max_batch:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._arrived.clear()
                try:
                    async with asyncio.timeout(remaining):
                        await self._arrived.wait()
                except TimeoutError:
                    break
            size = min(self.config.max_batch, len(self._waiting))
            batch = [self._waiting.popleft() for _ in range(size)]
            batch = [w for w in batch if not w.future.done()]  # callers that gave up
            batch = [w for w in batch if not self._expired(w, loop.time())]
            if not batch:
                continue
            self._in_flight = batch
            try:
                results = await loop.run_in_executor(
                    self.executor, self._call, [w.item for w in batch]
                )
            except Exception as exc:  # the whole call failed: every caller hears why
                log.exception("batch of %d failed", len(batch))
                results = [exc] * len(batch)
            for waiting, result in zip(batch, results, strict=True):
                if waiting.future.done():
                    continue
                if isinstance(result, BaseException):
                    waiting.future.set_exception(result)
                else:
                    waiting.future.set_result(result)
            self._in_flight = []

    def _expired(self, waiting: _Waiting[T, R], now: float) -> bool:
        if waiting.deadline is None or waiting.deadline > now:
            return False
        self.stats.expired += 1
        waiting.future.set_exception(
            DeadlineError(
                f"the deadline passed after {now - waiting.arrived:.3f} s in the queue; "
                "the query was dropped unprocessed"
            )
        )
        return True

    def _call(self, items: list[T]) -> Sequence[R | BaseException]:
        results = self.process(items)
        if len(results) != len(items):
            raise RuntimeError(f"batch function returned {len(results)} results for {len(items)}")
        self.stats.add(len(items))
        return results

    async def close(self) -> None:
        """Stop the worker; queued callers get OverloadedError."""
        self._closed = True
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        for waiting in [*self._in_flight, *self._waiting]:
            if not waiting.future.done():
                waiting.future.set_exception(OverloadedError("the server is shutting down"))
        self._waiting.clear()


def _unwrap(result: R | BaseException) -> R:
    if isinstance(result, BaseException):
        raise result
    return result
