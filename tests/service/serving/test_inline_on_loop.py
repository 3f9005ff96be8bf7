"""A lone cheap query on the event loop (service/serving/batch_calls.py, `inline_ms`): each kind
of cheap item is judged by what lone items of its kind have cost, the first of a kind measured
in a lane, and the kinds whose costs are kept are bounded; the server's kinds (an AUTO text's
by its route), which also say what singles are batched with."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from indexer.format.bundle import Bundle
from service.engine.search import SearchEngine
from service.query.cache import QueryCache
from service.results import SearchQuery
from service.serving.batch_calls import CHEAP_WEIGHT, MAX_KINDS, BatchCalls
from service.serving.batching import BatchingConfig, MicroBatcher
from service.serving.query_kind import query_kind
from service.serving.served_engine import PinnedQuery


def test_a_lone_cheap_query_runs_on_the_event_loop_by_what_its_kind_costs():
    """Items the server calls cheap (here: even numbers, of two kinds, small and large) run on
    the event loop when nothing is queued, once a lone one of their kind has been measured in a
    lane, while their kind has cost at most `inline_ms`; a dear kind goes to a lane without
    keeping the cheap kind off the loop. Odd numbers always go to a lane. Either way the caller
    gets the same answer, and the stats count it."""
    threads: list[str] = []

    def process(items: list[int]) -> list[int]:
        threads.append(threading.current_thread().name)
        return [i * 10 for i in items]

    def kind(i: int) -> str | None:
        return None if i % 2 else ("large" if i >= 100 else "small")

    async def scenario() -> list[int]:
        with ThreadPoolExecutor(2, thread_name_prefix="lane") as pool:
            config = BatchingConfig(inline_ms=1000.0)  # any trivial call is within it
            batcher = MicroBatcher(process, config, pool, cheap=kind)
            answers = [await batcher.submit(i) for i in (2, 4, 3, 100)]
            batcher.calls.costs["large"] = 5.0  # large items have lately cost 5 s: a lane
            answers += [await batcher.submit(i) for i in (102, 6)]
            off = MicroBatcher(process, BatchingConfig(inline_ms=0), pool, cheap=lambda i: "all")
            off.calls.costs["all"] = 0.0
            answers.append(await off.submit(8))
            await batcher.close()
            await off.close()
            assert batcher.stats.items == 6
            return answers

    loop = threading.current_thread().name
    assert asyncio.run(scenario()) == [20, 40, 30, 1000, 1020, 60, 80]
    where = ["loop" if name == loop else "lane" for name in threads]
    # 2: the first small one, measured in a lane; 4: on the loop; 3: odd; 100: the first large
    # one; 102: a dear kind; 6: small, still on the loop; 8: inlining off
    assert where == ["lane", "loop", "lane", "lane", "lane", "loop", "lane"]
    assert all(name.startswith("lane") for name in threads if name != loop)


def test_the_kinds_whose_costs_are_kept_are_bounded():
    """Past MAX_KINDS kinds a new kind makes room by dropping the oldest (a flood of distinct
    kinds grows nothing; a dropped kind is measured again in a lane when it comes back)."""
    calls = BatchCalls(lambda items: items, cheap=lambda i: i)
    for i in range(MAX_KINDS + 10):
        calls.cost(i, 0.0)
    assert len(calls.costs) == MAX_KINDS
    assert not calls.inline(0, 1.0)  # dropped: unknown again
    assert calls.inline(MAX_KINDS + 9, 1.0) and calls.inline(10, 1.0)
    calls.cost(10, 10.0)  # a known kind's average moves by CHEAP_WEIGHT of the new cost
    assert calls.costs[10] == pytest.approx(10.0 * CHEAP_WEIGHT)
    assert not calls.inline(10, 1.0)


def test_a_served_auto_text_is_of_the_kind_its_route_picks(text_bundle, minilm):
    """The server's kind of a cached AUTO text names the granularity its route picks, so an
    object phrase and a scene description are neither batched together nor judged by one
    cost; a text the cache lacks (it calls the encoder) has no kind."""
    engine = SearchEngine(Bundle.open(text_bundle), minilm, cache=QueryCache())
    texts = {"object": "a dog", "caption": "a dog that runs on the beach by the sea"}
    kinds = {}
    for expected, text in texts.items():
        query = SearchQuery.of(text, k=3)
        assert query_kind(PinnedQuery(engine, query)) is None  # not cached yet
        engine.search(query)
        assert engine.route(query).granularity.value == expected
        kinds[expected] = query_kind(PinnedQuery(engine, query))
    assert kinds["object"][:2] == ("text", "object")
    assert kinds["caption"][:2] == ("text", "caption")
    vector = SearchQuery.of(vector=[1.0] * engine.bundle.dim, granularity="object")
    assert query_kind(PinnedQuery(engine, vector))[:2] == ("vector", "object")
    asked = SearchQuery.of(texts["caption"], k=3, granularity="object")
    assert query_kind(PinnedQuery(engine, asked))[:2] == ("text", "object")


def test_concurrent_singles_of_two_kinds_become_a_call_per_kind():
    calls: list[list[int]] = []

    def process(items: list[int]) -> list[int]:
        calls.append(list(items))
        return [i * 10 for i in items]

    async def scenario() -> list[int]:
        batcher = MicroBatcher(
            process,
            BatchingConfig(max_batch=64, max_wait_ms=200),
            cheap=lambda i: "odd" if i % 2 else "even",
        )
        results = await asyncio.gather(*(batcher.submit(i) for i in range(10)))
        await batcher.close()
        return results

    assert asyncio.run(scenario()) == [i * 10 for i in range(10)]
    assert sorted(calls) == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
