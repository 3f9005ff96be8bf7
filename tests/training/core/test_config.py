"""The one config loader: overrides over a file, every failure one InputError line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import Field, field_validator

from training.core.config import ConfigModel, load_config
from training.core.errors import InputError


class Job(ConfigModel):
    epochs: int = Field(3, gt=0)
    name: str = "job"


def test_defaults_file_and_overrides_in_that_order(tmp_path: Path) -> None:
    assert load_config(Job) == Job()
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"epochs": 5, "name": "a"}))
    assert load_config(Job, path) == Job(epochs=5, name="a")
    assert load_config(Job, path, epochs=7, name=None) == Job(epochs=7, name="a")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "is not valid JSON"),
        ("[1]", "a config is a JSON object"),
        ('{"epochs": 0}', "epochs: Input should be greater than 0"),
        ('{"epoch": 2}', "epoch: Extra inputs are not permitted"),
    ],
)
def test_a_bad_file_is_one_line_naming_it(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "job.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as raised:
        load_config(Job, path)
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)


def test_a_missing_file_and_a_bad_override_are_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="config file not found"):
        load_config(Job, tmp_path / "absent.json")
    with pytest.raises(InputError, match="Job: epochs"):
        load_config(Job, epochs=-1)


class Batch(ConfigModel):
    size: int = 1

    @field_validator("size")
    @classmethod
    def positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"size must be at least 1, got {value}")
        return value


def test_a_validators_own_message_is_kept_without_pydantics_prefix() -> None:
    with pytest.raises(InputError) as raised:
        load_config(Batch, size=0)
    assert str(raised.value) == "Batch: size: size must be at least 1, got 0"
