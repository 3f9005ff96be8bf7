"""The readout-readings benchmark's arms: the logistic, then the discriminant and the sum at
each shrinkage."""

from __future__ import annotations

import numpy as np

from benchmarks.training.readout_readings import readings
from training.cedar.readout.discriminant import (
    discriminant_directions,
    mention_matrix,
    summed_in_standard_units,
)
from training.cedar.readout.vocabulary import ReadoutRows


def test_each_shrinkage_gives_a_discriminant_arm_and_its_sum_with_the_logistic():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 4)).astype(np.float32)
    mentions = mention_matrix([frozenset({i % 2}) for i in range(60)], 2)
    rows = ReadoutRows(
        words=["a", "b"],
        classes=["noun", "noun"],
        word_embeddings=np.eye(2, 4, dtype=np.float32),
        train_x=x,
        train_targets=np.zeros((60, 2), dtype=np.float32),
        train_mentions=mentions,
        train_support=np.zeros(2, dtype=np.int64),
        train_sample=np.arange(60),
        train_relevant=np.zeros((60, 2), dtype=bool),
        val_x=x[:10],
        val_targets=np.zeros((10, 2), dtype=np.float32),
        val_relevant=np.zeros((10, 2), dtype=bool),
        calibration=np.arange(10) < 5,
    )
    logistic = (rng.normal(size=(2, 4)).astype(np.float32), np.zeros(2, dtype=np.float32))
    arms = readings(rows, logistic, [0.01, 0.1])
    assert list(arms) == [
        "logistic",
        "discriminant, λ = 0.01",
        "sum, λ = 0.01",
        "discriminant, λ = 0.1",
        "sum, λ = 0.1",
    ]
    assert arms["logistic"] is logistic
    for shrinkage in (0.01, 0.1):
        direction = discriminant_directions(x, mentions, shrinkage)
        assert np.allclose(arms[f"discriminant, λ = {shrinkage:g}"][0], direction[0])
        expected = summed_in_standard_units([logistic, direction], x)
        assert np.allclose(arms[f"sum, λ = {shrinkage:g}"][0], expected[0])
        assert np.allclose(arms[f"sum, λ = {shrinkage:g}"][1], expected[1])
