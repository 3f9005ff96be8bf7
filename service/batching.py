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

Requests, not items, share the queue fairly. `submit(item)` is a request of one item;
`submit_many(items)` (a BatchSearch) one request of many, which contributes at most
`flow_share` items to any batch: a batch is filled round-robin from the waiting requests in
arrival order, and a request with items left goes to the back. So a small query that arrives
while a large request is being worked through waits for at most the batch being processed (at
most `flow_share` of the large request's items, when nothing else waits) and then rides in the
next one — never behind the large request's remaining items (no head-of-line blocking). A large
request alone is processed `flow_share` items at a time, which costs it throughput (on CPU
MiniLM, 4 texts take 1.4× one text, 32 take 5.5×) and buys everyone else a bounded wait; a
caller that gives up (a deadline, a cancelled call, a server stopping at its grace) takes its
items still waiting out of the queue at once, so its remaining work is never done.

Admission: a full queue (`max_queue` requests waiting, not counting the batch being processed)
refuses a submission at once with `OverloadedError` (RESOURCE_EXHAUSTED) rather than letting
latency grow without bound. A submission may carry a deadline (event-loop time): an item still
waiting when it passes is dropped with `DeadlineError` instead of being processed for a caller
that no longer waits; for `submit_many` the first failing item fails the request, and its
other waiting items are dropped.
With batching switched off (`enabled=False`, for load tests) every submission is processed
alone (a multi-item one `flow_share` items per call), on the same executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from service.errors import DeadlineError, OverloadedError
from training.errors import InputError

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class BatchingConfig:
    """`max_batch` items per call, `max_wait_ms` at most of waiting for company, `max_queue`
    requests waiting at most, `flow_share` items of one request per call at most;
    `enabled=False` processes every request alone."""

    enabled: bool = True
    max_batch: int = 32
    max_wait_ms: float = 0.0
    max_queue: int = 64
    flow_share: int = 4

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise InputError(f"max batch must be at least 1, got {self.max_batch}")
        if not 0 <= self.max_wait_ms <= 10_000:
            raise InputError(f"max wait must lie in [0, 10000] ms, got {self.max_wait_ms}")
        if self.max_queue < 1:
            raise InputError(f"max queue must be at least 1, got {self.max_queue}")
        if self.flow_share < 1:
            raise InputError(f"flow share must be at least 1, got {self.flow_share}")


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


@dataclass
class _Flow(Generic[T, R]):
    """One request's items still waiting, oldest first (`futures`: all of its items')."""

    items: deque[_Waiting[T, R]] = field(default_factory=deque)
    futures: list[asyncio.Future[R]] = field(default_factory=list)


class ItemError(Exception):
    """`submit_many`: the item at `index` failed with `error` (the request's other items were
    dropped)."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(f"item {index}: {error}")
        self.index, self.error = index, error


def take_batch(flows: deque[_Flow[T, R]], max_batch: int, share: int) -> list[_Waiting[T, R]]:
    """Fill one batch round-robin from the waiting requests (`flows`, arrival order): at most
    `share` items of each, at most `max_batch` in all; a request with items left moves to the
    back, emptied ones are dropped. Mutates `flows`; pure otherwise."""
    batch: list[_Waiting[T, R]] = []
    rotated: list[_Flow[T, R]] = []
    while flows and len(batch) < max_batch:
        flow = flows.popleft()
        for _ in range(min(share, max_batch - len(batch), len(flow.items))):
            batch.append(flow.items.popleft())
        if flow.items:
            rotated.append(flow)
    flows.extend(rotated)
    return batch


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
        self._flows: deque[_Flow[T, R]] = deque()
        self._in_flight: list[_Waiting[T, R]] = []
        self._arrived: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def waiting(self) -> int:
        """Requests queued with items not yet taken into a batch."""
        return len(self._flows)

    @property
    def waiting_items(self) -> int:
        return sum(len(flow.items) for flow in self._flows)

    async def submit(self, item: T, deadline: float | None = None) -> R:
        """The result of `process` for this item (its exception is raised here). `deadline`:
        the event-loop time after which the item is dropped unprocessed (DeadlineError)."""
        try:
            return (await self.submit_many([item], deadline))[0]
        except ItemError as exc:
            raise exc.error from None

    async def submit_many(self, items: Sequence[T], deadline: float | None = None) -> list[R]:
        """The results of `process` for these items, in order, as one request (module
        docstring): at most `flow_share` of them per batch. The first item that fails raises
        `ItemError` (its index and exception) and drops the request's items still waiting."""
        if self._closed:
            raise OverloadedError("the server is shutting down")
        loop = asyncio.get_running_loop()
        if deadline is not None and deadline <= loop.time():
            self.stats.expired += 1
            raise DeadlineError("the deadline passed before the query was queued")
        if not items:
            return []
        if not self.config.enabled:
            return await self._alone(list(items), loop)
        if len(self._flows) >= self.config.max_queue:
            raise OverloadedError(
                f"the query queue is full ({self.config.max_queue} requests waiting); retry later"
            )
        self._start(loop)
        now = loop.time()
        flow: _Flow[T, R] = _Flow(
            deque(_Waiting(item, loop.create_future(), now, deadline) for item in items)
        )
        futures = flow.futures = [w.future for w in flow.items]
        self._flows.append(flow)
        assert self._arrived is not None
        self._arrived.set()
        try:
            pending = set(futures)
            while pending:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                for index, future in enumerate(futures):
                    if future.done() and future.exception() is not None:
                        raise ItemError(index, future.exception())  # type: ignore[arg-type]
            return [future.result() for future in futures]
        finally:  # done, failed, or the caller gave up: what still waits leaves the queue
            self._drop(flow)

    def _drop(self, flow: _Flow[T, R]) -> None:
        with contextlib.suppress(ValueError):
            self._flows.remove(flow)
        for future in flow.futures:  # waiting or in a running batch: nobody awaits it now
            if not future.done():
                future.cancel()
        flow.items.clear()

    async def _alone(self, items: list[T], loop: asyncio.AbstractEventLoop) -> list[R]:
        """Batching off: `flow_share` items per call, in order, stopping at the first failure."""
        out: list[R] = []
        share = self.config.flow_share if len(items) > 1 else 1
        for start in range(0, len(items), share):
            results = await loop.run_in_executor(
                self.executor, self._call, items[start : start + share]
            )
            for offset, result in enumerate(results):
                if isinstance(result, BaseException):
                    raise ItemError(start + offset, result)
                out.append(result)
        return out

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._worker is None or self._worker.done():
            self._arrived = asyncio.Event()
            self._worker = loop.create_task(self._run(), name="strata-batcher")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._arrived is not None
        wait = self.config.max_wait_ms / 1000
        while True:
            while not self._flows:
                self._arrived.clear()
                await self._arrived.wait()
            deadline = self._flows[0].items[0].arrived + wait
            while self.waiting_items < self.config.max_batch:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._arrived.clear()
                try:
                    async with asyncio.timeout(remaining):
                        await self._arrived.wait()
                except TimeoutError:
                    break
                if not self._flows:
                    break
            batch = take_batch(self._flows, self.config.max_batch, self.config.flow_share)
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
        waiting = [w for flow in self._flows for w in flow.items]
        for item in [*self._in_flight, *waiting]:
            if not item.future.done():
                item.future.set_exception(OverloadedError("the server is shutting down"))
        self._flows.clear()
