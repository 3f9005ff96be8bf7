"""The micro-batcher: concurrent submits share one call, the wait is bounded, a full queue
refuses at once, errors stay with their own item."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from pydantic import ValidationError

from service.batching import BatchingConfig, MicroBatcher
from service.errors import OverloadedError
from training.core.config import build_config
from training.core.errors import InputError


class Recorder:
    """A batch function that records each call's items and can be held until released."""

    def __init__(self, hold: bool = False) -> None:
        self.calls: list[list[int]] = []
        self.started = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()

    def __call__(self, items: list[int]) -> list[int | BaseException]:
        self.calls.append(list(items))
        self.started.set()
        self.release.wait(10)
        return [ValueError(f"bad {i}") if i < 0 else i * 10 for i in items]


def run(coroutine):
    return asyncio.run(coroutine)


def test_batches_alternate_small_requests_and_chunks_of_a_large_one():
    """A large request is worked through in chunks that fit the chunk time by its items' cost
    so far; small requests waiting get batches of their own in between."""
    recorder = Recorder()
    batcher = MicroBatcher(recorder, BatchingConfig(max_batch=8, chunk_ms=1000))

    async def main():
        large = asyncio.ensure_future(batcher.submit_many(list(range(100, 120))))
        await asyncio.sleep(0.05)  # its first chunks run alone
        small = await asyncio.gather(*(batcher.submit(i) for i in range(3)))
        results = await large
        await batcher.close()
        return small, results

    small, results = run(main())
    assert small == [0, 10, 20] and results == [i * 10 for i in range(100, 120)]
    assert recorder.calls[0] == [100]  # the first chunk: one item (its cost unknown)
    assert max(len(c) for c in recorder.calls) == 8  # cheap items: chunks grow to max_batch
    mixed = [c for c in recorder.calls if any(i < 100 for i in c)]
    assert mixed == [[0, 1, 2]]  # the small ones together, with none of the large one's


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


def test_a_lone_query_waits_no_longer_than_max_wait():
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
    assert 0.035 <= elapsed < 1.0


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
        await asyncio.get_running_loop().run_in_executor(executor, recorder.started.wait, 5)
        queued = [asyncio.ensure_future(batcher.submit(i)) for i in (2, 3)]
        await asyncio.sleep(0)
        assert batcher.waiting == 2
        started = time.perf_counter()
        with pytest.raises(OverloadedError, match="queue is full"):
            await batcher.submit(4)
        refused_in = time.perf_counter() - started
        recorder.release.set()
        done = await asyncio.gather(first, *queued)
        await batcher.close()
        return done, refused_in

    done, refused_in = run(main())
    executor.shutdown()
    assert done == [10, 20, 30] and refused_in < 0.5


def test_switched_off_every_query_is_processed_alone():
    recorder = Recorder()
    batcher = MicroBatcher(recorder, BatchingConfig(enabled=False))

    async def main():
        return await asyncio.gather(*(batcher.submit(i) for i in range(5)))

    assert run(main()) == [0, 10, 20, 30, 40]
    assert sorted(map(tuple, recorder.calls)) == [(i,) for i in range(5)]


def test_closing_fails_waiting_callers():
    recorder = Recorder(hold=True)
    batcher = MicroBatcher(recorder, BatchingConfig(max_batch=1, max_wait_ms=0))

    async def main():
        waiting = [asyncio.ensure_future(batcher.submit(i)) for i in range(3)]
        await asyncio.sleep(0.05)
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
