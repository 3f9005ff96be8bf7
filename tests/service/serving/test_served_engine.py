"""The served engine: held once, swapped atomically, the swaps counted, lent to calls and a
swapped-out engine released when its last lease ends."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from service.engine.search import SearchEngine
from service.serving.served_engine import ServedEngine


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


def test_a_swapped_out_engine_is_released_when_its_last_lease_ends():
    first, second = cast(Any, object()), cast(Any, object())
    released: list[object] = []
    served = ServedEngine(first, on_release=released.append)
    with served.lease() as a, served.lease() as b:
        assert a is b is first and served.leases(first) == 2
        served.swap(second)
        with served.lease() as c:
            assert c is second  # calls that start after the swap get the new engine
        assert served.retired == [first] and released == []
    assert served.retired == [] and released == [first] and served.released == 1
    assert served.leases(first) == 0 and served.engine is second


def test_an_engine_no_call_holds_is_released_at_the_swap():
    first, second = cast(Any, object()), cast(Any, object())
    released: list[object] = []
    served = ServedEngine(first, on_release=released.append)
    served.swap(second)
    assert released == [first] and served.retired == [] and served.released == 1
    with served.lease():
        pass
    assert released == [first]  # the served engine is never released by its leases ending
