"""The served engine: held once, swapped atomically, the swaps counted."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from service.search import SearchEngine
from service.served_engine import ServedEngine


def test_a_swap_returns_the_old_engine_and_counts():
    first, second = cast(Any, object()), cast(Any, object())
    served = ServedEngine(first)
    assert served.engine is first and served.swaps == 0
    assert served.swap(second) is first
    assert served.engine is second and served.swaps == 1


def test_concurrent_swaps_lose_no_engine():
    engines: list[SearchEngine] = [cast(Any, object()) for _ in range(201)]
    served = ServedEngine(engines[0])
    with ThreadPoolExecutor(8) as pool:
        replaced = list(pool.map(served.swap, engines[1:]))
    assert served.swaps == 200
    assert {id(e) for e in [*replaced, served.engine]} == {id(e) for e in engines}
