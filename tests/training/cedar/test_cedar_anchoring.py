"""CEDAR's soft anchoring: anchored axes start at their words' directions and stay near them."""

from __future__ import annotations

import numpy as np
import pytest

from training.cedar.train import CedarConfig, anchored_start, train_cedar


def test_anchored_axes_start_at_their_words_and_stay_near_them():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(600, 12)).astype(np.float32) * np.linspace(2, 0.5, 12).astype(np.float32)
    words = rng.normal(size=(3, 12))
    words /= np.linalg.norm(words, axis=1, keepdims=True)
    start = anchored_start(words, x - x.mean(axis=0))
    assert np.allclose(start @ start.T, np.eye(12), atol=1e-8)
    assert start[0] @ words[0] == pytest.approx(1.0)  # the first anchor is its word
    assert (np.einsum("ad,ad->a", start[:3], words) > 0).all()
    # the anchored rows span the words: each word lies in them
    assert np.allclose(np.linalg.norm(words @ start[:3].T, axis=1), 1.0)
    config = CedarConfig(
        k=4, k_min=2, k_max=8, epochs=3, batch_size=100, anchor_words=3, anchor_weight=10.0
    )
    result = train_cedar(x[:500], x[500:], config, progress=False, anchors=words)
    assert np.allclose(result.rotation @ result.rotation.T, np.eye(12), atol=1e-5)
    drift = np.linalg.norm(result.rotation[:3] - start[:3], axis=1)
    free = train_cedar(x[:500], x[500:], config, progress=False, initial=start)
    assert drift.max() < np.linalg.norm(free.rotation[:3] - start[:3], axis=1).max()
    with pytest.raises(ValueError, match="anchors must be"):
        train_cedar(x[:500], x[500:], config, progress=False, anchors=np.ones((12, 12)))
