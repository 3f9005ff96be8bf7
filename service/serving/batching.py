"""Micro-batching: concurrent queries become one call of a blocking batch function.

Each `submit(item)` waits in a bounded queue; one worker task takes the oldest waiting items
(single queries: of the first one's kind, the server's `cheap` kind;
service/serving/batch_order.py), up to `max_batch`, as soon as either `max_batch` are waiting or
the oldest has waited `max_wait_ms`, and runs `process(items)` on an executor thread (the
encoder and FAISS are blocking), then hands each caller its own result — or its own exception,
so that one bad image fails one query, not its batch (the call and the hand-out:
service/serving/batch_calls.py). Up to `lanes` batches run at once (the executor needs as many
threads; the encoder, FAISS and the engine are safe to call from several threads): while one
lane is held by a long request, the next batch runs in another. While every lane is busy, new
arrivals queue up for the next free one. The default wait is 0: a query that finds the engine
idle runs at once (no latency added at low load: a lone query that finds nothing queued and a
lane free is put in that lane by its own call, without the hand-off to the worker task; one the
server calls cheap — no encoder call: a raw vector, or a text the query cache holds — runs on
the event loop itself while lone queries of its kind have cost at most `inline_ms`, sparing the
two thread hand-offs of a lane; the first of a kind runs in a lane, which measures it), and
under load batches still form from the queries that arrive while one runs — on two CPU cores the
2 ms wait cost 25 % of the latency at concurrency 1 and bought no throughput at 32 (`python -m
benchmarks.service.load --max-wait-ms 2`). A wait pays where a batch costs little more than one
query, as on a GPU.

Requests, not items, share the queue fairly. `submit(item)` is a request of one item;
`submit_many(items)` (a BatchSearch) one request of many, worked through in chunks;
`submit_call(call)` (an Explain) one request that runs `call()` alone on the same executor.
Which request the next batch serves is service/serving/batch_order.py's rule: the first in line
by arrival, moved back by the processing it has had — no caller starves, and a small query
beside a large request in one lane waits for at most two of its chunks; with two lanes or
more, not even that: a request holds one lane at most. A chunk is as many items as fit in
`chunk_ms` by what that request's items have cost so far (the first chunk: one item; at most
`max_batch`), and is never batched with another request's items (no head-of-line blocking).
A caller that gives up (a deadline, a cancelled call, a server stopping at its grace) takes its
items still waiting out of the queue at once, so its remaining work is never done.

Admission: a full queue (`max_queue` requests waiting, not counting the batch being processed)
refuses a submission at once with `OverloadedError` (RESOURCE_EXHAUSTED) rather than letting
latency grow without bound. A submission may carry a deadline (in the batcher's `clock`,
`time.monotonic` — the event loop's time — unless another is given): an item still
waiting when it passes is dropped with `DeadlineError` instead of being processed for a caller
that no longer waits; for `submit_many` the first failing item fails the request, and its
other waiting items are dropped.
With batching switched off (`enabled=False`, for load tests) every item is processed alone,
on the same executor, and admission holds all the same: a request beyond one running per lane
and `max_queue` waiting is refused with `OverloadedError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from concurrent.futures import Executor
from typing import Any, Generic, TypeVar

from service.errors import DeadlineError, OverloadedError
from service.serving.batch_calls import (
    BatchCalls,
    ItemError,
    called,
    hand_out,
    raise_if_cancelled,
)
from service.serving.batch_order import Flow, Waiting, take_batch
from service.serving.batching_config import BatchingConfig  # re-exported: its home before

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
C = TypeVar("C")


class MicroBatcher(Generic[T, R]):
    """Batches concurrent `submit` calls into `process(items) -> results` calls (one result or
    exception per item, in order). Use from one event loop; `close()` when done.

    `clock` (seconds) stamps arrivals, judges deadlines and the oldest item's wait, and times
    the chunks of a multi-item request; the default, `time.monotonic`, is the event loop's
    time. The wait for company itself sleeps on the event loop."""

    def __init__(
        self,
        process: Callable[[list[T]], Sequence[R | BaseException]],
        config: BatchingConfig | None = None,
        executor: Executor | None = None,
        clock: Callable[[], float] = time.monotonic,
        cheap: Callable[[T], Hashable | None] | None = None,
    ) -> None:
        # the batch function's calls; `cheap`: the kind of an item that may run on the event
        # loop, None for one that may not (inline_ms)
        self.calls = BatchCalls(process, cheap)
        self.stats = self.calls.stats
        self.config = config or BatchingConfig()
        self.executor = executor
        self.clock = clock
        self._flows: deque[Flow[T, R]] = deque()
        self._in_flight: list[list[Waiting[T, R]]] = []  # the batches being processed
        self._busy: set[Flow[T, R]] = set()  # requests with a chunk being processed
        self._lanes: set[asyncio.Task[None]] = set()
        self._arrived: asyncio.Event | None = None
        self._gate: asyncio.Semaphore | None = None  # the lanes: a batch holds one while it runs
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self._alone_requests = 0  # batching off: requests running or waiting for the executor

    @property
    def waiting(self) -> int:
        """Requests queued with items not yet taken into a batch."""
        return len(self._flows)

    @property
    def waiting_items(self) -> int:
        return sum(len(flow.items) for flow in self._flows)

    async def submit(self, item: T, deadline: float | None = None) -> R:
        """The result of `process` for this item (its exception is raised here). `deadline`:
        the time (by `clock`) after which the item is dropped unprocessed (DeadlineError)."""
        try:
            return (await self.submit_many([item], deadline))[0]
        except ItemError as exc:
            raise exc.error from None

    async def submit_many(
        self,
        items: Sequence[T],
        deadline: float | None = None,
        finish: Callable[[R], Any] | None = None,
    ) -> list[Any]:
        """The results of `process` for these items, in order, as one request (module
        docstring), worked through in chunks. `finish`, when given, is applied to each result
        on the executor thread, chunk by chunk (what a caller would otherwise do to all of them
        at the end, in one go, on the event loop). The first item that fails raises
        `ItemError` (its index and exception) and drops the request's items still waiting."""
        if self._closed:
            raise OverloadedError("the server is shutting down")
        loop = asyncio.get_running_loop()
        if deadline is not None and deadline <= self.clock():
            self.stats.expired += 1
            raise DeadlineError("the deadline passed before the query was queued")
        if not items:
            return []
        if not self.config.enabled:
            return await self._admitted_alone(
                lambda: self.calls.one_by_one(list(items), self.executor, loop, finish)
            )
        flow: Flow[T, R] = Flow(
            single=len(items) == 1 and finish is None,  # a one-query BatchSearch is finished
            finish=finish,
        )
        return await self._queued(flow, list(items), deadline, loop)

    async def submit_call(self, call: Callable[[], C], deadline: float | None = None) -> C:
        """`call()` run alone on the executor as one request, in its turn among the others
        (module docstring); its exception is raised here. Admission and `deadline` as for
        `submit`."""
        if self._closed:
            raise OverloadedError("the server is shutting down")
        loop = asyncio.get_running_loop()
        if deadline is not None and deadline <= self.clock():
            self.stats.expired += 1
            raise DeadlineError("the deadline passed before the call was queued")
        if not self.config.enabled:
            return await self._admitted_alone(lambda: loop.run_in_executor(self.executor, call))
        flow: Flow[Any, Any] = Flow(single=False, call=call)
        try:
            return (await self._queued(flow, [None], deadline, loop))[0]
        except ItemError as exc:
            raise exc.error from None

    async def _queued(
        self,
        flow: Flow[Any, Any],
        items: list[Any],
        deadline: float | None,
        loop: asyncio.AbstractEventLoop,
    ) -> list[Any]:
        """Queue `flow` with `items` and wait for all of their results (ItemError: the first
        that failed)."""
        if len(self._flows) >= self.config.max_queue:
            raise self._full()
        self._start(loop)
        now = flow.arrived = self.clock()
        kind = self.calls.kind(items[0]) if flow.single else None
        flow.items = deque(
            Waiting(item, loop.create_future(), now, deadline, kind) for item in items
        )
        futures = flow.futures = [w.future for w in flow.items]
        if flow.single and self._lane_free():  # nothing queued to wait for or batch with
            if self.calls.inline(kind, self.config.inline_ms / 1000):
                self.calls.serve_inline(flow.items.popleft(), kind)
            else:
                await self._serve_now(flow, loop)
        else:
            self._flows.append(flow)
            assert self._arrived is not None
            self._arrived.set()
        try:
            if len(futures) == 1:  # one item: its own future, without asyncio.wait's waiter
                future = futures[0]
                try:
                    return [await future]
                except BaseException:
                    if future.done() and not future.cancelled() and future.exception():
                        raise ItemError(0, future.exception()) from None  # type: ignore[arg-type]
                    raise  # the caller gave up (its cancel cancelled the future)
            pending = set(futures)
            while pending:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                for index, future in enumerate(futures):
                    if future.done() and future.exception() is not None:
                        raise ItemError(index, future.exception())  # type: ignore[arg-type]
            return [future.result() for future in futures]
        finally:  # done, failed, or the caller gave up: what still waits leaves the queue
            self._drop(flow)

    def _lane_free(self) -> bool:
        """Whether a query could run now without the worker's hand-off: no wait for company,
        nothing queued, a lane free."""
        gate = self._gate
        assert gate is not None  # `_start` made it
        return not self.config.max_wait_ms and not self._flows and not gate.locked()

    async def _serve_now(self, flow: Flow[T, R], loop: asyncio.AbstractEventLoop) -> None:
        """Run a lone query in a free lane at once, as the worker would have a moment later
        (the same `_serve`, so stats, results and `close` treat it alike)."""
        gate = self._gate
        assert gate is not None
        await gate.acquire()  # free (checked just before, on this loop): returns at once
        batch = list(flow.items)
        flow.items.clear()
        self._in_flight.append(batch)
        task = loop.create_task(self._serve(batch, None, gate, loop))
        self._lanes.add(task)
        task.add_done_callback(self._lanes.discard)

    def _full(self) -> OverloadedError:
        return OverloadedError(
            f"the query queue is full ({self.config.max_queue} requests waiting); retry later"
        )

    async def _admitted_alone(self, run: Callable[[], Awaitable[Any]]) -> Any:
        """Batching off: admission as with batching on (one per lane running, max_queue
        waiting), then `run()`."""
        if self._alone_requests >= self.config.lanes + self.config.max_queue:
            raise self._full()
        self._alone_requests += 1
        try:
            return await run()
        finally:
            self._alone_requests -= 1

    def _drop(self, flow: Flow[T, R]) -> None:
        if flow in self._flows:  # by identity; a ValueError's message would print the flow
            self._flows.remove(flow)
        for future in flow.futures:  # waiting or in a running batch: nobody awaits it now
            if not future.done():
                future.cancel()
        flow.items.clear()

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._worker is None or self._worker.done():
            self._arrived = asyncio.Event()
            self._gate = asyncio.Semaphore(self.config.lanes)
            self._worker = loop.create_task(self._run(), name="strata-batcher")

    async def _run(self) -> None:
        """Take batches in turn and process each in a free lane (`config.lanes` at once)."""
        loop = asyncio.get_running_loop()
        assert self._arrived is not None and self._gate is not None
        lanes = self._gate
        try:
            while True:
                await lanes.acquire()
                try:
                    batch, source = await self._next_batch()
                except BaseException:
                    lanes.release()
                    raise
                if source is not None:  # busy from now: its next chunk waits for this one
                    self._busy.add(source)
                self._in_flight.append(batch)
                task = loop.create_task(self._serve(batch, source, lanes, loop))
                self._lanes.add(task)
                task.add_done_callback(self._lanes.discard)
        finally:  # stopped: batches still running are failed by `close`, not left to finish
            for task in list(self._lanes):
                task.cancel()

    def _ready(self) -> list[Flow[T, R]]:
        """The requests waiting with items that are not busy (that a batch could take now)."""
        return [flow for flow in self._flows if flow.items and flow not in self._busy]

    def _ready_items(self) -> int:
        return sum(len(flow.items) for flow in self._ready())

    async def _next_batch(self) -> tuple[list[Waiting[T, R]], Flow[T, R] | None]:
        """The next batch to process (batch_order.take_batch), once one can be taken: after a
        request arrives or a busy one's chunk ends, and after the wait for company."""
        assert self._arrived is not None
        wait = self.config.max_wait_ms / 1000
        chunk_s = self.config.chunk_ms / 1000
        while True:
            while not self._ready_items():
                self._arrived.clear()
                await self._arrived.wait()
            oldest = min(flow.items[0].arrived for flow in self._ready())
            while self._ready_items() < self.config.max_batch:
                remaining = oldest + wait - self.clock()
                if remaining <= 0:
                    break
                self._arrived.clear()
                try:
                    async with asyncio.timeout(remaining):
                        await self._arrived.wait()
                except TimeoutError:
                    raise_if_cancelled()  # a cancel that met the timeout is still a cancel
                    break
                if not self._ready_items():
                    break
            batch, source = take_batch(self._flows, self.config.max_batch, chunk_s, self._busy)
            batch = [w for w in batch if not w.future.done()]  # callers that gave up
            batch = [w for w in batch if not self._expired(w, self.clock())]
            if batch:
                return batch, source

    async def _serve(
        self,
        batch: list[Waiting[T, R]],
        source: Flow[T, R] | None,
        lanes: asyncio.Semaphore,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """Process one batch (in flight, its request busy) in a lane and hand each caller its
        result; then free the lane."""
        began = self.clock()
        try:
            try:
                if source is not None and source.call is not None:
                    results = await loop.run_in_executor(self.executor, called, source.call)
                else:
                    finish = source.finish if source is not None else None
                    results, seconds = await loop.run_in_executor(
                        self.executor, self.calls.timed, [w.item for w in batch], finish
                    )
                    if len(batch) == 1:  # a single's kind was read when it was queued
                        alone = batch[0]
                        kind = alone.kind if source is None else self.calls.kind(alone.item)
                        self.calls.cost(kind, seconds)
                    self.stats.add(len(batch))
            except Exception as exc:  # the whole call failed: every caller hears why
                log.exception("batch of %d failed", len(batch))
                results = [exc] * len(batch)
            if source is not None:
                source.served += self.clock() - began
                source.item_s = (self.clock() - began) / len(batch)
            hand_out(batch, results)
        finally:
            # by identity: `==` on two batches would compare their queries field by field
            self._in_flight = [b for b in self._in_flight if b is not batch]
            if source is not None:
                self._busy.discard(source)
            lanes.release()
            assert self._arrived is not None
            if self._flows:  # a lane is free, and a request may have items left
                self._arrived.set()

    def _expired(self, waiting: Waiting[T, R], now: float) -> bool:
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

    async def close(self) -> None:
        """Stop the worker and its lanes; callers queued or in a running batch get
        OverloadedError."""
        self._closed = True
        running = [w for batch in self._in_flight for w in batch]  # before the lanes stop
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        waiting = [w for flow in self._flows for w in flow.items]
        for item in [*running, *waiting]:
            if not item.future.done():
                item.future.set_exception(OverloadedError("the server is shutting down"))
        self._flows.clear()
