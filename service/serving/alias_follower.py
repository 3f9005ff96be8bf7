"""Following a Milvus alias: when `strata index export` moves it to another collection, the
engine over that collection is built and swapped into the server — a hot swap without Redis."""

from __future__ import annotations

import logging
import threading

from service.engine.milvus.backend import following
from service.errors import ServiceError
from service.serving.served_engine import EngineHost

log = logging.getLogger(__name__)


class AliasFollower:
    """Polls the alias every `poll_s` seconds; when it names another collection, builds the
    engine over it (off the event loop) and swaps it into `server` — the zero-downtime switch
    `strata index export` makes. A failed poll or load is logged; the served engine stays."""

    def __init__(self, server: EngineHost, poll_s: float = 2.0) -> None:
        if not server.served.engine.scorer.follows_alias:
            raise ServiceError("the alias follower needs a Milvus-backed engine")
        self.server, self.poll_s = server, poll_s
        self.swaps, self.failures = 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="alias-follower", daemon=True)

    def start(self) -> AliasFollower:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.poll_s + 10)

    def check(self) -> bool:
        """One poll: swap when the alias moved; True when it swapped."""
        engine = self.server.served.engine
        current = engine.scorer.moved_to()
        if current is None:
            return False
        self.server.swap_engine(following(engine, current))
        self.swaps += 1
        log.info("the alias now names %s", current)
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.check()
            except Exception as exc:  # the served engine stays; the next poll tries again
                self.failures += 1
                log.warning("following the alias failed: %s", exc)
