"""The order in which the micro-batcher (service/serving/batching.py) serves the requests waiting:
the queue's entries and `take_batch`, the pure rule that picks the next batch.

Every batch goes to the request first in line by its turn, `arrived + SERVED_WEIGHT × served`
(`served`: the seconds of processing its chunks have had so far; ties go to the request served
fewer times, then to the earlier): a deadline-aware queue in which a request's place recedes
with the work done for it. A request that has had nothing waits its turn by arrival (no caller
starves: a newcomer's turn is never before its arrival), and one that has had as much
processing as it has waited lets newcomers pass (a small query beside a large request, in one
lane, waits for at most two of its chunks). When a single-item request is first, the batch is
the single-item requests waiting of its kind (`Waiting.kind`: what the query is, its granularity
and plan, whether it needs the encoder), in turn order (up to `max_batch`); otherwise it is one
chunk of the first request. Singles of different kinds search different indexes, so a batch
of them shares nothing but its wait: a caption query's full scan would hold every object query
batched beside it (AUTO text, 8 callers, one worker: `python -m benchmarks.service.placement`).

With several lanes (batches processed at once, `BatchingConfig.lanes`), a request whose chunk
is being processed in one lane is `busy`: it waits for that chunk before its next is taken, so
one request holds at most one lane and the others stay free for everyone else (a small query
beside the heaviest request runs beside it, not after it), and its chunks run in order.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

# how much a second of processing moves a request back in line. At 1, a request served for
# all the time since it arrived is level with a newcomer, so the two alternate; above 1 it yields
# sooner (weight 2: small queries' p50 fell, but the large ones' tail rose — under the mixed
# load at concurrency 8 with two lanes, p99/p50 per 300-call round was 5.1-5.5x, at 1 3.6-4.5x
# and 3.7x pooled over three rounds; below 1, an old request keeps the lane and a newcomer in
# one lane waits for all of it (0.5: 3.3-3.7x, p50 higher).
# python -m benchmarks.service.mixed_load --baseline TREE --repeats 3
SERVED_WEIGHT = 1.0

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Waiting(Generic[T, R]):
    """One item waiting; `kind`: a single query's (what it may be batched with, and what its
    cost is judged by: the server's `cheap` kind), None for the items of larger requests."""

    item: T
    future: asyncio.Future[R]
    arrived: float
    deadline: float | None = None
    kind: Hashable | None = None


@dataclass(eq=False)  # a request is itself: found and removed by identity, never by its fields
class Flow(Generic[T, R]):
    """One request's items still waiting, oldest first (`futures`: all of its items');
    `single`: a request of one item and no `finish`, which may share a batch with others like
    it of the same kind (`Waiting.kind`; a batch of singles is finished by nobody); `item_s`:
    what one of its items has cost (None: unknown); `call`: a request run alone
    (`submit_call`); `arrived`, `served` (seconds of processing so far) and `turns` (chunks
    taken) place it in line (`turn`)."""

    items: deque[Waiting[T, R]] = field(default_factory=deque)
    futures: list[asyncio.Future[R]] = field(default_factory=list)
    single: bool = True
    item_s: float | None = None
    finish: Callable[[R], Any] | None = None
    call: Callable[[], R] | None = None
    arrived: float = 0.0
    served: float = 0.0
    turns: int = 0

    def turn(self) -> tuple[float, int]:
        """Its place in line: earlier first (module docstring)."""
        return self.arrived + SERVED_WEIGHT * self.served, self.turns

    def chunk(self, chunk_s: float, most: int) -> int:
        """Items of this request in its next chunk: what fits in `chunk_s` (1 while unknown)."""
        if self.item_s is None:
            return 1
        return max(1, min(most, int(chunk_s / max(self.item_s, 1e-6))))


def take_batch(
    flows: deque[Flow[T, R]],
    max_batch: int,
    chunk_s: float,
    busy: Collection[Flow[T, R]] = (),
) -> tuple[list[Waiting[T, R]], Flow[T, R] | None]:
    """The next batch from the waiting requests (`flows`, arrival order) but those `busy` (a
    chunk of theirs being processed): when the request first in line (`Flow.turn`; arrival
    order breaks ties) is a single-item one, up to `max_batch` single-item requests of its kind
    in turn order; else one chunk of that request (one item for a `call`), which stays in the queue
    while items remain. Returns the batch and the request it came from (None: singles; an
    empty batch when every request waiting is busy). Mutates `flows`."""
    ready = [f for f in flows if f not in busy]
    if not ready:
        return [], None
    first = min(ready, key=Flow.turn)  # min: the earliest-arrived among equal turns
    if first.single:
        kind = first.items[0].kind
        alike = (f for f in flows if f.single and f.items[0].kind == kind)
        taken = sorted(alike, key=Flow.turn)[:max_batch]
        gone = {id(f) for f in taken}
        kept = [f for f in flows if id(f) not in gone]
        flows.clear()
        flows.extend(kept)
        return [f.items.popleft() for f in taken], None
    most = 1 if first.call is not None else first.chunk(chunk_s, max_batch)
    batch = [first.items.popleft() for _ in range(min(most, len(first.items)))]
    first.turns += 1
    if not first.items:
        flows.remove(first)
    return batch, first
