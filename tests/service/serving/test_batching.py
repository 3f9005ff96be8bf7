"""The micro-batcher: concurrent submits share one call, the wait is bounded, a full queue
refuses at once, errors stay with their own item. The batch function is held by an event where
a test needs the batcher busy, and item costs are counted on a clock moved by hand."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from pydantic import ValidationError
from serving_helpers import HandClock
from waiting import WAIT_S

from service.errors import OverloadedError
from service.serving.batching import BatchingConfig, ItemError, MicroBatcher
from training.core.config import build_config
from training.core.errors import InputError


class Recorder:
    """A batch function that records each call's items and can be held until released; with a
    `clock`, each item moves it by `item_s` (what the item costs, as the batcher measures it)."""

    def __init__(
        self, hold: bool = False, clock: HandClock | None = None, item_s: float = 0.0
    ) -> None:
        self.calls: list[list[int]] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.clock, self.item_s = clock, item_s
        if not hold:
            self.release.set()

    def __call__(self, items: list[int]) -> list[int | BaseException]:
        self.calls.append(list(items))
        self.started.set()
        self.release.wait(WAIT_S)
        if self.clock is not None:
            self.clock.advance(self.item_s * len(items))
        return [ValueError(f"bad {i}") if i < 0 else i * 10 for i in items]


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.mark.parametrize(("item_s", "chunk"), [(0.25, 4), (0.0, 8)])
def test_batches_alternate_small_requests_and_chunks_of_a_large_one(item_s: float, chunk: int):
    """A large request is worked through in chunks that fit the chunk time (1 s) by what its
    items cost so far (`item_s` each, at most max_batch); small requests that arrive while a
    chunk runs get a batch of their own before the next chunk."""
    clock = HandClock()
    recorder = Recorder(hold=True, clock=clock, item_s=item_s)
    one_lane = BatchingConfig(max_batch=8, chunk_ms=1000, lanes=1)
    batcher = MicroBatcher(recorder, one_lane, clock=clock)

    async def main():
        large = asyncio.ensure_future(batcher.submit_many(list(range(100, 120))))
        assert await asyncio.to_thread(recorder.started.wait, WAIT_S)  # its first chunk runs
        small = asyncio.gather(*(batcher.submit(i) for i in range(3)))
        await asyncio.sleep(0)
        assert batcher.waiting == 4  # the rest of the large request, and the small ones
        recorder.release.set()
        results = await large
        await batcher.close()
        return await small, results

    small, results = run(main())
    assert small == [0, 10, 20] and results == [i * 10 for i in range(100, 120)]
    rest = list(range(101, 120))
    chunks = [rest[i : i + chunk] for i in range(0, len(rest), chunk)]
    # the first chunk: one item (its cost unknown); then the small ones together, with none of
    # the large one's; then chunks of what fits in 1 s
    assert recorder.calls == [[100], [0, 1, 2], *chunks]


def test_concurrent_submits_become_one_call_with_results_in_place():
    recorder = Recorder()
    batcher = MicroBatcher(recorder, BatchingConfig(max_batch=64, max_wait_ms=200))

    async def main():
        results = await asyncio.gather(*(batcher.submit(i) for i in range(10)))
        await batcher.close()
        return results

    assert run(main()) == [i * 10 for i in range(10)]
    assert recorder.calls == [list(range(10))]
    assert batcher.stats.batches == 1 and batcher.stats.largest == 10


def test_batches_are_cut_at_max_batch():
    recorder = Recorder()
    batcher = MicroBatcher(recorder, BatchingConfig(max_batch=4, max_wait_ms=200))

    async def main():
        results = await asyncio.gather(*(batcher.submit(i) for i in range(10)))
        await batcher.close()
        return results

    assert run(main()) == [i * 10 for i in range(10)]
    assert [len(c) for c in recorder.calls] == [4, 4, 2]


def test_a_lone_query_waits_max_wait_for_company_then_runs_alone():
    recorder = Recorder()
    batcher = MicroBatcher(recorder, BatchingConfig(max_batch=32, max_wait_ms=40))

    async def main():
        started = time.perf_counter()
        result = await batcher.submit(7)
        elapsed = time.perf_counter() - started
        await batcher.close()
        return result, elapsed

    result, elapsed = run(main())
    assert result == 70 and recorder.calls == [[7]]
    assert 0.035 <= elapsed < WAIT_S  # it waited for company, not for a batch that never fills


def test_an_item_error_fails_its_caller_only():
    batcher = MicroBatcher(Recorder(), BatchingConfig(max_wait_ms=50))

    async def main():
        results = await asyncio.gather(
            batcher.submit(1), batcher.submit(-1), batcher.submit(2), return_exceptions=True
        )
        await batcher.close()
        return results

    first, bad, second = run(main())
    assert (first, second) == (10, 20)
    assert isinstance(bad, ValueError) and "bad -1" in str(bad)


def test_a_full_queue_refuses_at_once():
    recorder = Recorder(hold=True)
    executor = ThreadPoolExecutor(1)
    batcher = MicroBatcher(recorder, BatchingConfig(max_batch=1, max_wait_ms=0, max_queue=2))

    async def main():
        first = asyncio.ensure_future(batcher.submit(1))
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(executor, recorder.started.wait, WAIT_S)
        queued = [asyncio.ensure_future(batcher.submit(i)) for i in (2, 3)]
        await asyncio.sleep(0)
        assert batcher.waiting == 2
        refusal = batcher.submit(4)
        with pytest.raises(OverloadedError, match="queue is full"):
            refusal.send(None)  # refused on its first step: it never waits for anything
        held = list(recorder.calls)  # still [[1]]: the refusal did not wait for the batch
        recorder.release.set()
        done = await asyncio.gather(first, *queued)
        await batcher.close()
        return done, held

    done, held = run(main())
    executor.shutdown()
    assert done == [10, 20, 30] and held == [[1]]


def test_switched_off_every_query_is_processed_alone():
    recorder = Recorder()
    batcher = MicroBatcher(recorder, BatchingConfig(enabled=False))

    async def main():
        return await asyncio.gather(*(batcher.submit(i) for i in range(5)))

    assert run(main()) == [0, 10, 20, 30, 40]
    assert sorted(map(tuple, recorder.calls)) == [(i,) for i in range(5)]


def test_switched_off_a_request_stops_at_its_first_failed_item():
    recorder = Recorder()
    batcher = MicroBatcher(recorder, BatchingConfig(enabled=False))

    async def main():
        with pytest.raises(ItemError) as caught:
            await batcher.submit_many([1, 2, -3, 4], finish=lambda r: r + 1)
        return caught.value, await batcher.submit_many([5, 6], finish=lambda r: r + 1)

    error, finished = run(main())
    assert error.index == 2 and str(error.error) == "bad -3"
    assert finished == [51, 61] and recorder.calls == [[1], [2], [-3], [5], [6]]
    assert batcher.stats.batches == batcher.stats.items == 5


def test_a_batch_function_short_of_results_fails_its_callers():
    async def main():
        batcher = MicroBatcher(lambda items: [], BatchingConfig())
        try:
            with pytest.raises(RuntimeError, match="returned 0 results for 1"):
                await batcher.submit(1)
        finally:
            await batcher.close()

    run(main())


class HeldLarge:
    """A batch function that holds every call with an item ≥ 100 (the large request's chunks)
    until released, and records the calls and the most of them running at once."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.release = threading.Event()
        self.started = threading.Event()
        self._lock = threading.Lock()
        self.running = self.most_large_at_once = 0

    def __call__(self, items: list[int]) -> list[int]:
        large = items[0] >= 100
        with self._lock:
            self.calls.append(list(items))
            self.running += large
            self.most_large_at_once = max(self.most_large_at_once, self.running)
        if large:
            self.started.set()
            self.release.wait(WAIT_S)
        with self._lock:
            self.running -= large
        return [i * 10 for i in items]


def test_a_small_query_runs_beside_a_large_request_in_another_lane():
    """Two lanes: while a chunk of a large request is held in one, small queries are answered in
    the other; the large request holds one lane at most, so its chunks run one after the other,
    in order."""
    recorder = HeldLarge()
    batcher = MicroBatcher(recorder, BatchingConfig(max_batch=4, lanes=2))

    async def main():
        large = asyncio.ensure_future(batcher.submit_many(list(range(100, 110))))
        assert await asyncio.to_thread(recorder.started.wait, WAIT_S)  # its first chunk is held
        small = [await batcher.submit(i) for i in range(3)]  # answered while it is held
        held = [list(c) for c in recorder.calls]
        assert batcher.waiting == 1  # the large request's rest waits for its own chunk
        recorder.release.set()
        results = await large
        await batcher.close()
        return small, held, results

    small, held, results = run(main())
    assert small == [0, 10, 20] and held == [[100], [0], [1], [2]]
    assert results == [i * 10 for i in range(100, 110)]
    large_calls = [c for c in recorder.calls if c[0] >= 100]
    assert [i for c in large_calls for i in c] == list(range(100, 110))
    assert recorder.most_large_at_once == 1


def test_batches_that_end_out_of_order_leave_the_lanes_whatever_their_items():
    """Two lanes: the second request is answered whole while the first's chunk still runs, so
    each of its batches leaves the batches in flight past the first's — by identity: items
    such as query vectors (numpy arrays, whose `==` has no truth value) are never compared
    (before, that comparison raised in the lane and the second request never finished)."""
    started, release = threading.Event(), threading.Event()

    def process(items: list[np.ndarray]) -> list[float]:
        if not items[0].any():  # the first request's: held until the second is answered
            started.set()
            assert release.wait(WAIT_S)
        return [float(item.sum()) for item in items]

    batcher = MicroBatcher(process, BatchingConfig(lanes=2))

    async def main():
        first = asyncio.ensure_future(batcher.submit_many([np.zeros(4), np.zeros(4)]))
        assert await asyncio.to_thread(started.wait, WAIT_S)
        second = await asyncio.wait_for(batcher.submit_many([np.ones(4), np.ones(4)]), WAIT_S)
        release.set()
        answers = [await first, second]
        await batcher.close()
        return answers

    assert run(main()) == [[0.0, 0.0], [4.0, 4.0]]


@pytest.mark.parametrize("lanes", [1, 2])
def test_closing_fails_waiting_callers(lanes: int):
    recorder = Recorder(hold=True)
    batcher = MicroBatcher(recorder, BatchingConfig(max_batch=1, max_wait_ms=0, lanes=lanes))

    async def main():
        waiting = [asyncio.ensure_future(batcher.submit(i)) for i in range(3)]
        assert await asyncio.to_thread(recorder.started.wait, WAIT_S)  # one in the batch function
        assert batcher.waiting == 3 - lanes  # one per lane in the batch function, the rest queued
        await batcher.close()
        recorder.release.set()
        results = await asyncio.gather(*waiting, return_exceptions=True)
        with pytest.raises(OverloadedError, match="shutting down"):
            await batcher.submit(9)
        return results

    results = run(main())
    assert all(isinstance(r, OverloadedError) for r in results)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_batch": 0}, "max batch"),
        ({"max_wait_ms": -1}, "max wait"),
        ({"max_queue": 0}, "max queue"),
    ],
)
def test_bad_settings_are_refused(settings: dict, message: str):
    with pytest.raises(ValidationError, match=message):
        BatchingConfig(**settings)
    with pytest.raises(InputError, match=f"^batching: {next(iter(settings))}: .*{message}"):
        build_config(BatchingConfig, settings, "batching")  # the CLI's one-line error


def test_submit_many_finishes_each_result_on_the_executor():
    recorder = Recorder()
    threads: set[str] = set()

    def finish(result: int) -> str:
        threads.add(threading.current_thread().name)
        return f"<{result}>"

    async def main():
        with ThreadPoolExecutor(1, thread_name_prefix="engine") as pool:
            batcher = MicroBatcher(recorder, BatchingConfig(max_batch=4), pool)
            results = await batcher.submit_many([1, 2, 3], finish=finish)
            await batcher.close()
        return results

    assert run(main()) == ["<10>", "<20>", "<30>"]
    assert threads and all(name.startswith("engine") for name in threads)


@pytest.mark.parametrize("items", [[1], [1, 2]])
def test_a_finished_request_is_finished_whatever_its_size(items: list[int]):
    """A one-item request with a `finish` (a BatchSearch of one query) gets it too; before, it
    ran as a plain single and came back unfinished (INTERNAL over gRPC). Plain single queries
    beside it still share its call."""
    recorder = Recorder(hold=True)
    batcher = MicroBatcher(recorder, BatchingConfig(max_batch=8, max_wait_ms=1))

    async def main():
        blocker = asyncio.ensure_future(batcher.submit(0))  # holds the engine
        await asyncio.get_running_loop().run_in_executor(None, recorder.started.wait, WAIT_S)
        finished = asyncio.ensure_future(batcher.submit_many(items, finish=lambda r: f"<{r}>"))
        single = asyncio.ensure_future(batcher.submit(5))
        recorder.release.set()
        results = await asyncio.gather(finished, single, blocker)
        await batcher.close()
        return results

    finished, single, _ = run(main())
    assert finished == [f"<{10 * i}>" for i in items]
    assert single == 50


def test_a_call_runs_alone_in_its_turn_between_the_chunks_of_a_large_request():
    """`submit_call` (an Explain): queued like a request, run by itself on the executor before
    the next chunk of a request that has had its share; its exception reaches its caller."""
    clock = HandClock()
    recorder = Recorder(hold=True, clock=clock, item_s=0.25)
    batcher = MicroBatcher(recorder, BatchingConfig(max_batch=8, chunk_ms=1000), clock=clock)

    def explain() -> str:
        recorder.calls.append(["explain"])  # type: ignore[list-item]
        return "why"

    def broken() -> str:
        raise ValueError("no such row")

    async def main():
        large = asyncio.ensure_future(batcher.submit_many(list(range(100, 110))))
        assert await asyncio.to_thread(recorder.started.wait, WAIT_S)  # its first chunk runs
        call = asyncio.ensure_future(batcher.submit_call(explain))
        failing = asyncio.ensure_future(batcher.submit_call(broken))
        await asyncio.sleep(0)
        assert batcher.waiting == 3
        recorder.release.set()
        results = await asyncio.gather(large, call, failing, return_exceptions=True)
        await batcher.close()
        return results

    large, why, failed = run(main())
    assert large == [i * 10 for i in range(100, 110)] and why == "why"
    assert isinstance(failed, ValueError) and "no such row" in str(failed)
    assert recorder.calls == [
        [100],
        ["explain"],
        list(range(101, 105)),
        list(range(105, 109)),
        [109],
    ]
