"""The one config style: a pydantic model per job, loaded by one function with one-line errors.

A config is data (a JSON file, command-line overrides, or both), validated in full before any
work starts. `ConfigModel` forbids unknown keys, so a misspelt field is an error, not a silent
default; `load_config` turns every failure (a missing file, bad JSON, a bad value) into one
`InputError` naming the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from training.core.errors import InputError


class ConfigModel(BaseModel):
    """Base of every config: unknown keys rejected, values checked on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


Config = TypeVar("Config", bound=BaseModel)


def validation_message(error: ValidationError, where: str) -> str:
    """The first problem of a ValidationError as one line: `where: field.sub: message` (a
    validator's own ValueError message as it wrote it, without pydantic's "Value error, ")."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "config"
    own = first["type"] == "value_error" and "error" in first.get("ctx", {})
    message = str(first["ctx"]["error"]) if own else first["msg"]
    return f"{where}: {field}: {message}"


def build_config(model: type[Config], values: dict[str, Any], where: str) -> Config:
    """`model` validated from `values`; InputError (one line, naming `where`) if invalid."""
    try:
        return model.model_validate(values)
    except ValidationError as error:
        raise InputError(validation_message(error, where)) from None


def load_config(model: type[Config], path: Path | None = None, **overrides: Any) -> Config:
    """The config in the JSON file `path` (defaults without one), with the overrides that are
    not None laid over it; InputError naming the file and the field on any failure."""
    values: dict[str, Any] = {}
    if path is not None:
        if not path.is_file():
            raise InputError(f"config file not found: {path}")
        try:
            values = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise InputError(f"{path} is not valid JSON: {error}") from None
        if not isinstance(values, dict):
            raise InputError(f"{path}: a config is a JSON object, got {type(values).__name__}")
    values.update({name: value for name, value in overrides.items() if value is not None})
    return build_config(model, values, str(path) if path else f"{model.__name__}")
