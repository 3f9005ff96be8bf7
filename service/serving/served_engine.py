"""The engine a server serves, held in one place, replaced atomically by a hot swap, and lent to
each call for as long as the call runs.

    served = ServedEngine(engine)
    with served.lease() as engine:  # one version for the whole call, whatever swaps meanwhile
        ...
    old = served.swap(new)          # from any thread; calls already running keep their lease
    served.engine                   # the engine of the moment (catalog and info reads)

A Search, a BatchSearch (worked in chunks between other requests) and an Explain each take a
lease when they start and answer from that engine to the end: a swap that lands between two
chunks of a batch changes the engine of the calls that start afterwards, not of that batch.
A swapped-out engine is `retired` while leases on it remain; when its last call ends it is
released: this object drops its reference (`released` counts it, `on_release` is called),
so its indexes are freed once nothing else refers to it.

The micro-batcher's items are `PinnedQuery`s, a query with the engine its call leased:
`search_pinned` answers a batch that mixes engines (a swap between two single queries) by
searching each engine's queries on that engine, in order. `EngineHost` is what a follower
of new versions (service/serving/hot_swap.py, service/serving/alias_follower.py) needs of the
server it swaps engines in: `StrataServer` (service/api/server.py) is one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple, Protocol

from service.engine.search import SearchEngine
from service.errors import ServiceError
from service.query.embedding import EncoderObserver
from service.results import SearchQuery, SearchResult
from service.serving.metrics import ServerMetrics

log = logging.getLogger(__name__)


class EngineHost(Protocol):
    """A server that serves an engine and swaps in new ones: what follows new versions."""

    served: ServedEngine
    metrics: ServerMetrics

    def swap_engine(self, new_engine: SearchEngine) -> SearchEngine: ...


class ServedEngine:
    """The one reference to the served engine, the leases on every engine still in use, and how
    many times it was swapped and how many retired engines were released."""

    def __init__(
        self, engine: SearchEngine, on_release: Callable[[SearchEngine], None] | None = None
    ) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._leases: dict[int, int] = {}  # id(engine) -> calls holding it (only while > 0)
        self._retired: dict[int, SearchEngine] = {}  # swapped out, still leased
        self.on_release = on_release
        self.swaps = 0
        self.released = 0

    @property
    def engine(self) -> SearchEngine:
        return self._engine

    @contextmanager
    def lease(self) -> Iterator[SearchEngine]:
        """The engine of the moment, held for this call until the block ends."""
        with self._lock:
            engine = self._engine
            self._leases[id(engine)] = self._leases.get(id(engine), 0) + 1
        try:
            yield engine
        finally:
            self._return(engine)

    def _return(self, engine: SearchEngine) -> None:
        with self._lock:
            left = self._leases[id(engine)] - 1
            if left:
                self._leases[id(engine)] = left
                return
            del self._leases[id(engine)]
            released = self._retired.pop(id(engine), None)
            if released is not None:
                self.released += 1
        if released is not None:
            self._released(released)

    def leases(self, engine: SearchEngine) -> int:
        """Calls holding `engine` now."""
        with self._lock:
            return self._leases.get(id(engine), 0)

    @property
    def retired(self) -> list[SearchEngine]:
        """Swapped-out engines that calls still hold."""
        with self._lock:
            return list(self._retired.values())

    def swap(self, new_engine: SearchEngine) -> SearchEngine:
        """Serve `new_engine` from now on; the engine it replaces (released at once when no call
        holds it, else when the last one ends)."""
        with self._lock:
            old, self._engine = self._engine, new_engine
            self.swaps += 1
            held = old is not new_engine and id(old) in self._leases
            if held:
                self._retired[id(old)] = old
            elif old is not new_engine:
                self.released += 1
        if not held and old is not new_engine:
            self._released(old)
        return old

    def _released(self, engine: SearchEngine) -> None:
        log.info("released bundle %s: its last call ended", _name(engine))
        if self.on_release is not None:
            self.on_release(engine)


def _name(engine: SearchEngine) -> str:
    bundle = getattr(engine, "bundle", None)
    return str(getattr(bundle, "name", "?"))


class PinnedQuery(NamedTuple):
    """A query and the engine its call holds a lease on."""

    engine: SearchEngine
    query: SearchQuery


def search_pinned(
    items: list[PinnedQuery], metrics: EncoderObserver | None = None
) -> list[SearchResult | ServiceError]:
    """Each query searched on its own engine (one `search_batch` per engine), results in order."""
    by_engine: dict[int, list[int]] = {}
    for index, item in enumerate(items):
        by_engine.setdefault(id(item.engine), []).append(index)
    results: list[SearchResult | ServiceError | None] = [None] * len(items)
    for indexes in by_engine.values():
        engine = items[indexes[0]].engine
        answers = engine.search_batch([items[i].query for i in indexes], metrics)
        for index, answer in zip(indexes, answers, strict=True):
            results[index] = answer
    return results  # type: ignore[return-value]  (every slot filled)
