"""The placement benchmark's summary: each arm's medians, and this checkout against the other
round by round (the rounds' runs are built here; the live part needs h2load and two servers)."""

from __future__ import annotations

import pytest

from benchmarks.service.placement import summary


def test_the_summary_pairs_the_two_servers_round_by_round() -> None:
    # the machine halves its speed after two rounds; this checkout is 10 % faster in each
    runs = {
        "vector c=1": {
            "this": [1100.0, 1100.0, 550.0, 550.0],
            "compare": [1000.0, 1000.0, 500.0, 500.0],
        }
    }
    arm = summary(runs)["vector c=1"]
    assert arm["this / compare"] == pytest.approx(1.1)
    assert (arm["this qps"], arm["compare qps"]) == (825.0, 750.0)
