"""The query cache's circuit breaker, on a clock moved by hand."""

from __future__ import annotations

import pytest
from serving_helpers import HandClock

from service.query.circuit_breaker import CircuitBreaker


def test_the_breaker_opens_on_failure_backs_off_and_closes_on_success():
    clock = HandClock()
    breaker = CircuitBreaker(backoff=1.0, max_backoff=3.0, clock=clock)
    assert breaker.closed and breaker.wait() == 0
    breaker.failure()
    assert not breaker.closed and breaker.wait() == 1.0
    clock.advance(0.4)
    assert breaker.wait() == pytest.approx(0.6)
    breaker.failure()  # a failed retry: twice the back-off
    assert breaker.wait() == 2.0
    breaker.failure()
    breaker.failure()
    assert breaker.wait() == 3.0  # capped
    breaker.success()
    assert breaker.closed and breaker.backoff == 1.0 and breaker.failures == 0
