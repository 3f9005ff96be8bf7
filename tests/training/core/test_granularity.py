"""The granularity -> prefix-length contract."""

from __future__ import annotations

import pytest

from training.core.errors import InputError
from training.core.granularity import (
    Granularity,
    GranularityError,
    default_contract,
    granularity_choices,
    parse_granularity,
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


@pytest.mark.parametrize(
    ("value", "auto", "parsed"),
    [
        ("object", False, Granularity.OBJECT),
        (" Caption\n", False, Granularity.CAPTION),
        (Granularity.FULL, True, Granularity.FULL),
        ("auto", True, None),
        (" AUTO ", True, None),
        ("", True, None),
    ],
)
def test_parse_granularity_reads_names_and_auto(value, auto: bool, parsed):
    assert parse_granularity(value, auto=auto) is parsed


@pytest.mark.parametrize(
    ("value", "auto", "message"),
    [
        (
            "scene",
            True,
            "unknown granularity 'scene'; choose from auto, object, attribute, relation, caption, "
            "full",
        ),
        ("auto", False, "unknown granularity 'auto'; choose from object, attribute, relation, "),
        ("", False, "unknown granularity ''; choose from object, "),
        ("x" * 1000, True, r"unknown granularity 'x{40}'… \(1000 characters\); choose from auto"),
    ],
)
def test_parse_granularity_refuses_with_one_message(value: str, auto: bool, message: str):
    with pytest.raises(GranularityError, match=message) as caught:
        parse_granularity(value, auto=auto)
    assert isinstance(caught.value, InputError)
    assert granularity_choices(auto=auto)[-1] == "full"
