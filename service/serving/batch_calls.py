"""How the micro-batcher (service/serving/batching.py) calls its batch function and hands out
what it returns.

`BatchCalls` is the batch function as the batcher runs it: `process(items)`, checked to give
one result (or exception) per item, with a request's `finish` applied to each result; the
counters (`BatchStats`); for each kind of cheap item, the moving average of what lone ones have
cost, which decides whether the next of that kind runs on the event loop
(`BatchingConfig.inline_ms`); and, with batching off, the items called one by one. `hand_out`
gives each waiting caller its own result or exception; `ItemError` is how a request of many
items fails at its first failed item.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from service.serving.batch_order import Waiting

log = logging.getLogger(__name__)

CHEAP_WEIGHT = 0.2  # the moving average's weight of the latest lone cheap item
# kinds of cheap item whose costs are kept, the latest measured: the server's kinds are a
# handful a bundle version; a new kind past these makes room by dropping the oldest (which, if
# it comes again, is measured again in a lane)
MAX_KINDS = 64

T = TypeVar("T")
R = TypeVar("R")


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


class ItemError(Exception):
    """`submit_many`: the item at `index` failed with `error` (the request's other items were
    dropped)."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(f"item {index}: {error}")
        self.index, self.error = index, error


class BatchCalls(Generic[T, R]):
    """`process(items) -> results` as the batcher calls it (module docstring). `cheap` names
    the kind of an item that may run on the event loop (None: it may not); `costs` is what lone
    items of each kind have lately cost, in seconds, as a moving average."""

    def __init__(
        self,
        process: Callable[[list[T]], Sequence[R | BaseException]],
        cheap: Callable[[T], Hashable | None] | None = None,
    ) -> None:
        self.process = process
        self.cheap = cheap
        self.costs: dict[Hashable, float] = {}
        self.stats = BatchStats()

    def __call__(self, items: list[T], finish: Callable[[R], Any] | None = None) -> Sequence[Any]:
        results = self.process(items)
        if len(results) != len(items):
            raise RuntimeError(f"batch function returned {len(results)} results for {len(items)}")
        if finish is None:
            return results
        return [_finished(finish, r) for r in results]

    def timed(
        self, items: list[T], finish: Callable[[R], Any] | None = None
    ) -> tuple[Sequence[Any], float]:
        """`self(items, finish)` and the seconds it took where it ran (a lane's thread: its
        hand-offs not counted, so a kind is judged by its work alone, wherever it ran)."""
        began = time.perf_counter()
        results = self(items, finish)
        return results, time.perf_counter() - began

    def kind(self, item: T) -> Hashable | None:
        """The item's kind if it may run on the event loop, else None (`cheap`)."""
        return None if self.cheap is None else self.cheap(item)

    def inline(self, kind: Hashable | None, budget_s: float) -> bool:
        """Whether a lone item of `kind` runs on the event loop: the kind is cheap, and lone
        items of it have cost at most `budget_s` of late. The first of a kind runs in a lane,
        which measures it: a kind that costs more than the budget never blocks the loop."""
        if budget_s <= 0 or kind is None:
            return False
        cost = self.costs.get(kind)
        return cost is not None and cost <= budget_s

    def cost(self, kind: Hashable | None, seconds: float) -> None:
        """Fold a lone item's cost into the moving average of its kind's (wherever it ran)."""
        if kind is None:
            return
        known = self.costs.get(kind)
        if known is not None:
            self.costs[kind] = known + CHEAP_WEIGHT * (seconds - known)
            return
        if len(self.costs) >= MAX_KINDS:
            del self.costs[next(iter(self.costs))]  # the oldest kind
        self.costs[kind] = seconds

    async def one_by_one(
        self,
        items: list[T],
        executor: Executor | None,
        loop: asyncio.AbstractEventLoop,
        finish: Callable[[R], Any] | None = None,
    ) -> list[Any]:
        """Batching off: one item per call on `executor`, in order, stopping at the first
        failure (ItemError)."""
        out: list[Any] = []
        for start in range(len(items)):
            results = await loop.run_in_executor(executor, self, items[start : start + 1], finish)
            self.stats.add(len(results))
            for offset, result in enumerate(results):
                if isinstance(result, BaseException):
                    raise ItemError(start + offset, result)
                out.append(result)
        return out

    def serve_inline(self, waiting: Waiting[T, R], kind: Hashable | None) -> None:
        """Process a lone cheap item (of `kind`) here, on the event loop: no lane, no thread
        hand-off."""
        began = time.perf_counter()
        try:
            (result,) = self([waiting.item])
        except Exception as exc:
            log.exception("query failed")
            result = exc
        self.cost(kind, time.perf_counter() - began)
        self.stats.add(1)
        hand_out([waiting], [result])


def hand_out(batch: Sequence[Waiting[Any, Any]], results: Sequence[Any]) -> None:
    """Each caller still waiting its own result, or its own exception raised."""
    for waiting, result in zip(batch, results, strict=True):
        if waiting.future.done():
            continue
        if isinstance(result, BaseException):
            waiting.future.set_exception(result)
        else:
            waiting.future.set_result(result)


def called(call: Callable[[], R]) -> list[R | BaseException]:
    """`[call()]`, or `[the exception it raised]`."""
    try:
        return [call()]
    except Exception as exc:
        return [exc]


def raise_if_cancelled() -> None:
    """CancelledError when the running task has been asked to stop: for a loop whose await can
    come back without raising it (a timeout that expired as the cancel came), so that a
    cancelled worker ends instead of waiting on forever (and holding up `asyncio.run`'s exit)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _finished(finish: Callable[[R], Any], result: R | BaseException) -> Any:
    """`finish(result)`, or the exception it (or the item) raised."""
    if isinstance(result, BaseException):
        return result
    try:
        return finish(result)
    except Exception as exc:
        return exc
