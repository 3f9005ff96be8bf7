"""The GPU script's parts, run on the CPU (the script itself needs a CUDA machine; the tests
never do)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.service.gpu import (
    DeviceFlat,
    check_device,
    flat_section,
    funnel_section,
)
from training.core.errors import InputError
from training.synthetic import spectrum_rows


def test_spectrum_rows_are_unit_rows_with_falling_variance() -> None:
    rows = spectrum_rows(4000, 64, alpha=1.0, seed=0)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    variance = rows.var(axis=0)
    assert variance[:8].mean() > 5 * variance[-8:].mean()


def test_the_cpu_arms_agree_and_the_funnel_finds_the_exact_neighbours() -> None:
    rows, queries = spectrum_rows(3000, 64, 1.0, seed=0), spectrum_rows(8, 64, 1.0, seed=1)
    flat = flat_section(rows, queries, "cpu", rounds=1)
    assert flat["prefix_4"]["device_kind"] == "faiss-cpu" and flat["prefix_64"]["single_ms"]
    funnel = funnel_section(rows, queries, "cpu", rounds=1, factor=300)  # the whole gallery
    assert funnel["recall_at_10"] == {"device": 1.0, "cpu": 1.0}
    scores, found = DeviceFlat(rows, "cpu").search(queries, 10)
    np.testing.assert_allclose(scores[:, 0], np.max(queries @ rows.T, axis=1), rtol=1e-5)
    assert found.shape == (8, 10)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_device_is_one_clear_error() -> None:
    with pytest.raises(InputError, match="no CUDA device here"):
        check_device("cuda")
    check_device("cpu")
