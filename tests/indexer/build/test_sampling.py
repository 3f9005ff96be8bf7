"""The training reservoir: bounded, and uniform over everything it has seen."""

from __future__ import annotations

import numpy as np

from indexer.build.sampling import Reservoir


def test_fills_then_stays_bounded():
    reservoir = Reservoir(5, 2)
    reservoir.add(np.ones((3, 2)))
    assert reservoir.sample().shape == (3, 2) and not reservoir.full
    reservoir.add(np.zeros((100, 2)))
    assert reservoir.sample().shape == (5, 2) and reservoir.seen == 103


def test_every_row_is_equally_likely_whatever_the_batching():
    """Rows 0..199 offered in uneven batches to a reservoir of 20, 1,000 times: each row should
    be kept with probability 20/200 = 0.1."""
    kept = np.zeros(200)
    for seed in range(1000):
        reservoir = Reservoir(20, 1, seed)
        for start, stop in ((0, 7), (7, 60), (60, 61), (61, 200)):
            reservoir.add(np.arange(start, stop, dtype=np.float32)[:, None])
        sample = reservoir.sample()[:, 0].astype(int)
        assert len(set(sample)) == 20  # no row twice
        kept[sample] += 1
    share = kept / 1000
    assert abs(share.mean() - 0.1) < 1e-9
    assert np.abs(share - 0.1).max() < 0.05  # ~5 standard deviations
    assert abs(share[:100].mean() - share[100:].mean()) < 0.01  # early rows are not favoured
