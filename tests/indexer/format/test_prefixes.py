"""The prefix space: rotation (whole and in blocks) and exact top-k."""

from __future__ import annotations

import numpy as np
import pytest

from indexer.format.prefixes import exact_top_k, rotate_blocks, rotate_rows
from training.core.metrics import prefix_vectors
from training.synthetic import random_grasp_artifact


def test_rotation_is_one_matmul_and_keeps_full_length_cosine():
    grasp = random_grasp_artifact(32, seed=3)
    x = np.random.default_rng(0).normal(size=(10, 32)).astype(np.float16)
    z = rotate_rows(x, grasp)
    expected = (x.astype(np.float32) - grasp.mean) @ grasp.rotation.T
    np.testing.assert_allclose(z, expected, rtol=1e-6)
    centred = x.astype(np.float32) - grasp.mean
    np.testing.assert_allclose(z @ z.T, centred @ centred.T, rtol=1e-4, atol=1e-4)


def test_exact_top_k():
    gallery = np.eye(4, dtype=np.float32)
    scores, rows = exact_top_k(gallery, np.array([[0.1, 0.9, 0.5, 0.0]]), 2)
    assert rows.tolist() == [[1, 2]] and scores[0, 0] == pytest.approx(0.9)


def test_rotating_in_blocks_gives_the_rows_of_one_rotation():
    grasp = random_grasp_artifact(64, seed=4)
    x = np.random.default_rng(1).normal(size=(1000, 64)).astype(np.float16)
    whole = rotate_rows(x, grasp)
    # blocks may take other BLAS kernels (summing in another order): equal up to float32 rounding
    for block in (256, 7):
        np.testing.assert_allclose(rotate_blocks(x, grasp, block=block), whole, rtol=0, atol=1e-5)
    out = np.full((1000, 64), np.nan, dtype=np.float32)
    assert rotate_blocks(x, grasp, block=256, out=out) is out
    np.testing.assert_array_equal(out, rotate_blocks(x, grasp, block=256))
    with pytest.raises(ValueError, match=r"out must be float32 \(1000, 64\)"):
        rotate_blocks(x, grasp, out=np.zeros((999, 64), np.float32))
    with pytest.raises(ValueError, match=r"shape \[N, 64\]"):
        rotate_blocks(x[:, :8], grasp)
    # renormalising blocks of rows is renormalising the rows
    blocks = [prefix_vectors(whole[start : start + 256], 16) for start in range(0, 1000, 256)]
    np.testing.assert_array_equal(np.concatenate(blocks), prefix_vectors(whole, 16))
