"""The query cache's circuit breaker: when to try Redis again after it failed.

Closed: use Redis. A failure opens it for `backoff` seconds; each failure while open doubles
the back-off (up to `max_backoff`); a success closes it and resets the back-off. The clock is
a parameter, so the policy is tested without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DEFAULT_BACKOFF_S = 0.5
DEFAULT_MAX_BACKOFF_S = 10.0


class CircuitBreaker:
    """Closed: use Redis. A failure opens it until `backoff` seconds pass; each failure while
    open doubles the back-off (up to `max_backoff`); a success closes it and resets it."""

    def __init__(
        self,
        backoff: float = DEFAULT_BACKOFF_S,
        max_backoff: float = DEFAULT_MAX_BACKOFF_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.initial, self.max_backoff, self.clock = backoff, max(backoff, max_backoff), clock
        self.backoff = backoff
        self.open_until: float | None = None
        self.failures = 0  # consecutive

    @property
    def closed(self) -> bool:
        return self.open_until is None

    def failure(self) -> None:
        if self.open_until is not None:
            self.backoff = min(self.backoff * 2, self.max_backoff)
        self.failures += 1
        self.open_until = self.clock() + self.backoff

    def success(self) -> None:
        self.open_until, self.backoff, self.failures = None, self.initial, 0

    def wait(self) -> float:
        """Seconds until the next try is due (0: now; 0 as well when closed)."""
        if self.open_until is None:
            return 0.0
        return max(0.0, self.open_until - self.clock())
