"""A training run's thread pins: never more torch threads than the cores the process may use."""

from __future__ import annotations

import os

import pytest

from training.core import seeding


def test_training_threads_never_exceed_the_usable_cores(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert seeding.training_threads() == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert seeding.training_threads() == seeding.MAX_TRAINING_THREADS


def test_a_seeded_block_pins_then_restores_torch_threads():
    import torch

    before = torch.get_num_threads()
    with seeding.seeded(0):
        assert torch.get_num_threads() == seeding.training_threads()
    assert torch.get_num_threads() == before
