"""The benchmarks' shared timing (benchmarks/harness.py): interleaved calls and the paired
median of what one arm adds to another."""

from __future__ import annotations

import statistics

import pytest

from benchmarks.harness import interleaved_times, paired_median, paired_ratio


def test_the_paired_median_is_what_one_arm_adds_where_the_p50s_lie_between_groups():
    """The premise built in: ten queries whose costs fall in two groups, five cheap and five
    dear, and an arm that adds 0.1 to each. The p50 of such a mix lies in the gap, the mean of
    the dearest cheap call and the cheapest dear one, so one call's noise there moves the
    difference of the p50s far from 0.1; the median of the per-call differences stays at it."""
    faster = [1.0, 1.0, 1.0, 1.0, 1.8, 5.0, 5.0, 5.0, 5.0, 5.0]  # one cheap call slow this time
    slower = [cost + 0.1 for cost in [1.0] * 5 + [5.0] * 5]
    p50s = statistics.median(slower) - statistics.median(faster)
    assert p50s == pytest.approx(-0.3)  # the other arm looks faster
    assert paired_median(slower, faster) == pytest.approx(0.1)


def test_paired_median_refuses_arms_of_different_calls():
    with pytest.raises(ValueError, match="same calls"):
        paired_median([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="same calls"):
        paired_median([], [])


def test_interleaved_times_calls_every_arm_on_every_query_in_turn():
    calls: list[tuple[str, int]] = []
    arms = {name: (lambda i, name=name: calls.append((name, i))) for name in ("a", "b")}
    times = interleaved_times(arms, queries=3, rounds=2)
    assert calls[:2] == [("a", 0), ("b", 0)]  # the warm call of each
    assert calls[2:] == [(n, i) for _ in range(2) for i in range(3) for n in ("a", "b")]
    assert {name: len(t) for name, t in times.items()} == {"a": 6, "b": 6}
    assert all(t >= 0 for seconds in times.values() for t in seconds)


def test_the_paired_ratio_cancels_a_drift_between_rounds():
    """The premise built in: the machine runs at half speed in the first round and full speed
    after, and one arm always does 1.5x the other's throughput within a round. The ratio of
    the medians takes each median from another round; the per-round ratio stays at 1.5."""
    baseline = [500.0, 1000.0, 1000.0]
    arm = [750.0, 1500.0, 1450.0]  # its last round a little slow
    assert statistics.median(arm) / statistics.median(baseline) == pytest.approx(1.45)
    assert paired_ratio(arm, baseline) == pytest.approx(1.5)


def test_paired_ratio_refuses_unpaired_or_empty_rounds():
    with pytest.raises(ValueError, match="same rounds"):
        paired_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="same rounds"):
        paired_ratio([], [])
    with pytest.raises(ValueError, match="round of 0"):
        paired_ratio([1.0], [0.0])
