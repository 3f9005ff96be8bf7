"""Waiting for an event in a test: a bounded wait on a condition, never a sleep of a guessed
length. The bound, WAIT_S, only catches a hang: a test that passes never comes near it."""

from __future__ import annotations

import time
from collections.abc import Callable

WAIT_S = 30.0  # how long a test waits for an event before failing


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until `condition()` held; fails the test naming `what` after `timeout`."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, f"timed out waiting for {what}"
        time.sleep(0.05)
    return time.monotonic() - started
