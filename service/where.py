"""Metadata conditions written as text, as `strata search --where` and `client.search(where=...)`
take them, typed by the bundle's metadata schema (`GetIndexInfo.metadata_schema`):

    split=test               equals
    split IN train,dev       any of (comma-separated; `in` in any case)
    year>=2000  year<2010    a range end: >=, >, <=, < (two conditions on a field: both hold)
    taken>=2024-01-01T00:00  timestamps and dates as ISO-8601 text

The value is converted to the column's type (integer, number, bool: true/false/1/0/yes/no;
string, timestamp and date columns take the text itself), so `year>=abc` on an integer column
fails here, naming the field, before a request is sent. Pure functions: no pyarrow, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from service.errors import QueryError, echo
from service.results import MetadataCondition, MetadataRange, MetadataScalar

_IN = re.compile(r"^\s*([^\s=<>!]+)\s+in\s+(.*)$", re.IGNORECASE)
_COMPARE = re.compile(r"^\s*([^\s=<>!]+)\s*(>=|<=|>|<|=)\s*(.*)$")
_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def parse_where(text: str, schema: Mapping[str, str]) -> MetadataCondition:
    """One condition from its text (module docstring); QueryError naming what is wrong."""
    found = _IN.match(text)
    if found:
        field, values = found.group(1), found.group(2)
        kind = _kind(field, schema, text)
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not items:
            raise QueryError(f"{echo(text)}: IN lists no values")
        return MetadataCondition(field, any_of=tuple(typed(field, kind, v) for v in items))
    found = _COMPARE.match(text)
    if not found or not found.group(3).strip() or found.group(3).strip()[0] in "<>=!":
        raise QueryError(
            f"cannot read the condition {echo(text)}; write FIELD=VALUE, FIELD IN A,B or "
            "FIELD>=X (also >, <=, <)"
        )
    field, operator, raw = found.group(1), found.group(2), found.group(3).strip()
    kind = _kind(field, schema, text)
    value = typed(field, kind, raw)
    if operator == "=":
        return MetadataCondition(field, equals=value)
    if operator.startswith(">"):
        span = MetadataRange(min=value, min_exclusive=operator == ">")
    else:
        span = MetadataRange(max=value, max_exclusive=operator == "<")
    return MetadataCondition(field, range=span)


def typed(field: str, kind: str, raw: str) -> MetadataScalar:
    """The text of a value as the column's type asks for it."""
    try:
        if kind == "integer":
            return int(raw)
        if kind == "number":
            return float(raw)
    except ValueError:
        raise QueryError(f"metadata field {echo(field)} is {kind}; got {echo(raw)}") from None
    if kind == "bool":
        if raw.lower() not in _BOOLS:
            raise QueryError(f"metadata field {echo(field)} is bool (true/false); got {echo(raw)}")
        return _BOOLS[raw.lower()]
    return raw


def _kind(field: str, schema: Mapping[str, str], text: str) -> str:
    if field not in schema:
        raise QueryError(
            f"{echo(text)}: unknown metadata field {echo(field)}; "
            f"the bundle has {', '.join(schema) or 'none'}"
        )
    return schema[field]
