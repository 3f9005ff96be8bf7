"""What a direct scan of the store must answer, for the tests of its integer and kernel scans:
the float scan's answer."""

from __future__ import annotations

import numpy as np
import pytest

from indexer.format.store import VectorStore


def float_scan(store: VectorStore, monkeypatch: pytest.MonkeyPatch, *args):
    """The same scan with the integer path off."""
    with monkeypatch.context() as patch:
        patch.setattr(VectorStore, "integer_scannable", lambda self, *_: False)
        return store.scan(*args)


def assert_same_answer(store: VectorStore, q: np.ndarray, length: int, got, want) -> None:
    """The same top-k scores in order, each row returned once with its own score: the float
    scan's answer up to which of rows equal to float rounding it lists."""
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-5)
    np.testing.assert_array_equal(got[1] == -1, want[1] == -1)
    for i in range(len(q)):
        found = got[1][i][got[1][i] >= 0]
        assert len(set(found)) == len(found)
        own = store.prefix_scores(found, length, q[i])
        np.testing.assert_allclose(own, got[0][i][: len(found)], rtol=0, atol=1e-5)
