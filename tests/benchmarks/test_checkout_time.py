"""The checkout-time benchmark's arms: NAME=ROOT:BUNDLES, a malformed one refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.service.checkout_time import arm
from training.core.errors import InputError


def test_an_arm_names_its_checkout_and_its_bundles(tmp_path: Path):
    name, root, bundles = arm(f"after={tmp_path}:{tmp_path / 'bundles'}")
    assert (name, root, bundles) == ("after", tmp_path.resolve(), (tmp_path / "bundles").resolve())


@pytest.mark.parametrize("text", ["after", "after=.", "=.:b", "after=:b"])
def test_a_malformed_arm_is_refused_naming_it(text: str):
    with pytest.raises(InputError, match="expected NAME=ROOT:BUNDLES"):
        arm(text)
