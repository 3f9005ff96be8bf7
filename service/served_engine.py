"""The engine a server serves, held in one place and replaced atomically by a hot swap.

    served = ServedEngine(engine)
    served.engine               # the engine of the moment: read it once per call or batch
    old = served.swap(new)      # from any thread; calls already running keep the one they read

The servicer, the micro-batcher's batch function, the AdminService and the hot-swap follower
all read the engine from here, so a swap replaces it for each of them at once.
"""

from __future__ import annotations

import threading

from service.search import SearchEngine


class ServedEngine:
    """The one reference to the served engine, and how many times it was swapped."""

    def __init__(self, engine: SearchEngine) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self.swaps = 0

    @property
    def engine(self) -> SearchEngine:
        return self._engine

    def swap(self, new_engine: SearchEngine) -> SearchEngine:
        """Serve `new_engine` from now on; the engine it replaces."""
        with self._lock:
            old, self._engine = self._engine, new_engine
            self.swaps += 1
        return old
