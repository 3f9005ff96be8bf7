"""The granularity -> prefix-length contract."""

from __future__ import annotations

import pytest

from training.core.errors import InputError
from training.core.granularity import (
    Granularity,
    default_contract,
    previous_prefix,
    validate_contract,
)


def test_default_contract_matches_design():
    assert list(default_contract(384).values()) == [24, 48, 96, 192, 384]
    assert list(default_contract(512).values()) == [32, 64, 128, 256, 512]
    with pytest.raises(InputError, match="at least 16"):
        default_contract(8)


def test_contract_from_json_keys():
    contract = validate_contract(
        {"object": 2, "attribute": 4, "relation": 6, "caption": 7, "full": 8}, 8
    )
    assert contract[Granularity.RELATION] == 6
    assert previous_prefix(contract, Granularity.OBJECT) == 0
    assert previous_prefix(contract, Granularity.CAPTION) == 6


@pytest.mark.parametrize(
    ("contract", "message"),
    [
        ({"object": 2, "attribute": 4, "relation": 6, "caption": 7}, "lacks full"),
        (
            {"object": 4, "attribute": 4, "relation": 6, "caption": 7, "full": 8},
            "strictly increasing",
        ),
        (
            {"object": 2, "attribute": 4, "relation": 6, "caption": 7, "full": 9},
            "must equal the dimension 8",
        ),
        ({"objects": 2, "attribute": 4, "relation": 6, "caption": 7, "full": 8}, "bad granularity"),
    ],
)
def test_bad_contracts(contract, message: str):
    with pytest.raises(InputError, match=message):
        validate_contract(contract, 8)
