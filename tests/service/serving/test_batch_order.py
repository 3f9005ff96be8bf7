"""The order of service (service/serving/batch_order.py `take_batch`, pure): which waiting
request the next batch serves, by its turn (arrival plus the work it has had), and that no
request starves beside another, simulated on a clock of its own."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from service.serving.batch_order import Flow, Waiting, take_batch


def flow(arrived: float, items: int, served: float = 0.0, item_s: float | None = None) -> Any:
    """A waiting request of `items` items (a single-item one when 1), its items named by its
    arrival."""
    waiting = deque(Waiting((arrived, i), None, arrived) for i in range(items))  # type: ignore[arg-type]
    return Flow(waiting, single=items == 1, arrived=arrived, served=served, item_s=item_s)


def test_the_next_batch_goes_to_the_earliest_turn_arrival_plus_the_work_done():
    served_much = flow(100.0, 10, served=2.0, item_s=0.25)  # turn 102
    waited_longest = flow(101.0, 10, item_s=0.25)  # turn 101: before the singles
    singles = [flow(101.5, 1), flow(101.6, 1)]
    flows = deque([served_much, waited_longest, *singles])
    batch, source = take_batch(flows, 8, 1.0)
    assert source is waited_longest and [w.item for w in batch] == [(101.0, i) for i in range(4)]
    waited_longest.served += 1.0  # its chunk took 1 s: its turn is 102 now, served once more
    batch, source = take_batch(flows, 8, 1.0)
    assert source is None and [w.item for w in batch] == [(101.5, 0), (101.6, 0)]
    batch, source = take_batch(flows, 8, 1.0)
    assert source is served_much and len(batch) == 4
    assert list(flows) == [served_much, waited_longest]  # both still have items


def test_a_call_is_one_chunk_and_an_unserved_request_goes_before_a_served_one_of_equal_turn():
    served = flow(100.0, 5, served=0.0, item_s=0.1)
    served.turns = 1  # a chunk that cost nothing (a hand clock)
    call = Flow(deque([Waiting(None, None, 100.0)]), single=False, call=print, arrived=100.0)  # type: ignore[arg-type]
    flows = deque([served, call])
    assert take_batch(flows, 8, 1.0)[1] is call and list(flows) == [served]


@pytest.mark.parametrize("small_every_s", [None, 0.05])
def test_no_request_starves_and_a_small_query_waits_at_most_two_chunks(small_every_s):
    """Simulated on the batcher's order in one lane: a large request (40 items of 1 s, one per
    chunk) beside small queries of 0.05 s — one caller sending the next when the last is
    answered (None), or a flood arriving every 0.05 s, as fast as the engine can serve them
    alone. The small caller waits at most for the chunk running when it arrives and the next
    (the large request's turn is level with its own); under the flood the large request still
    gets a share of the engine (done within 2.5x its work)."""
    now, large = 0.0, flow(0.0, 40, item_s=1.0)
    flows: deque = deque([large])
    waits, arrivals, next_small = [], {}, 0.0
    while large.items:
        if small_every_s is None and not any(f.single for f in flows):
            arrivals[len(arrivals)] = now  # the caller's next query
            flows.append(flow(now, 1))
        while small_every_s is not None and next_small <= now:
            arrivals[len(arrivals)] = next_small
            flows.append(flow(next_small, 1))
            next_small += small_every_s
        batch, source = take_batch(flows, 8, 1.0)
        now += 1.0 * len(batch) if source is large else 0.05
        if source is large:
            large.served += 1.0 * len(batch)
        else:
            waits += [now - w.arrived for w in batch]
    if small_every_s is None:
        assert max(waits) <= 2 * 1.0 + 0.05 + 1e-9  # two chunks of the large one, then its own
    assert now <= 2.5 * 40  # the large request's 40 s of work done within 2.5× that


def test_singles_are_batched_with_their_own_kind_only_in_turn_order():
    """A batch of singles holds only those of the first one's kind (different kinds search
    different indexes: batched, a scene query's scan would hold every object query beside
    it); the other kind keeps its place in line and is the next batch."""
    kinds = ["object", "caption", "object", "caption", "object"]
    flows: deque = deque()
    for i, kind in enumerate(kinds):
        single = flow(100.0 + i, 1)
        single.items[0].kind = kind
        flows.append(single)
    batch, source = take_batch(flows, 8, 1.0)
    assert source is None and [w.item for w in batch] == [(100.0, 0), (102.0, 0), (104.0, 0)]
    batch, _ = take_batch(flows, 8, 1.0)
    assert [w.item for w in batch] == [(101.0, 0), (103.0, 0)] and not flows
    unknown = deque([flow(1.0, 1), flow(2.0, 1)])  # no kind known: one kind, as before
    assert len(take_batch(unknown, 8, 1.0)[0]) == 2
