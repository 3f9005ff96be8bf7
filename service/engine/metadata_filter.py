"""Metadata conditions (`SearchQuery.where`) and grouping keys over a bundle's row table.

The bundle's `ids.parquet` holds, per row, the cache's metadata columns; their parquet types
give each column a condition type (`field_type`): string, integer, number, bool, timestamp or
date ("other" — lists, structs, binary — cannot be tested or grouped by). A condition's value
must be of its column's type (an integer column takes an int, a number column an int or float,
a timestamp or date column ISO-8601 text); anything else is a `QueryError` naming the field.

`MetadataFilter.rows(conditions)` evaluates the conditions with pyarrow compute over the whole
column (equality, set membership through `is_in`, ranges through the comparison kernels; a null
meets no test) and ANDs them into one sorted row array — once per request, and remembered per
bundle for the last `CACHE_ENTRIES` distinct condition sets (a filter shared by many queries,
"split = test", is computed once). The engine intersects it with the concept filter's allowed
rows (indexer/format/row_bitmaps.py, `AllowedRows.within`) and searches inside the result, so a
metadata-filtered search returns top_k hits whenever top_k rows qualify.

`MetadataFilter.group_keys(field)` dictionary-encodes a column once per bundle: a code per row
(−1 for null) and the distinct values as text, what grouping (service/engine/grouping.py) reads.
"""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from service.errors import QueryError, echo
from service.results import MetadataCondition, MetadataScalar

CACHE_ENTRIES = 64


def field_type(kind: pa.DataType) -> str:
    """The condition type of a parquet column type (module docstring)."""
    if pa.types.is_dictionary(kind):
        return field_type(kind.value_type)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "string"
    if pa.types.is_boolean(kind):
        return "bool"
    if pa.types.is_integer(kind):
        return "integer"
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return "number"
    if pa.types.is_timestamp(kind):
        return "timestamp"
    if pa.types.is_date(kind):
        return "date"
    return "other"


def metadata_schema(schema: pa.Schema) -> dict[str, str]:
    """Every metadata column (all but `id`) with its condition type, in the table's order."""
    return {f.name: field_type(f.type) for f in schema if f.name != "id"}


class MetadataFilter:
    """Conditions and grouping keys over one bundle version's row table (module docstring)."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.schema = metadata_schema(table.schema)
        self._rows: OrderedDict[tuple[MetadataCondition, ...], np.ndarray] = OrderedDict()
        self._groups: dict[str, tuple[np.ndarray, list[str]]] = {}

    def column(self, name: str) -> pa.ChunkedArray:
        column = self.table.column(name)
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        return column

    def check_field(self, name: str, role: str) -> str:
        """The column's condition type; QueryError when the bundle lacks it or it is "other"."""
        if name not in self.schema:
            raise QueryError(
                f"unknown metadata field {echo(name)} in {role}; "
                f"the bundle has {', '.join(self.schema) or 'none'}"
            )
        kind = self.schema[name]
        if kind == "other":
            found = self.table.schema.field(name).type
            raise QueryError(f"metadata field {echo(name)} ({found}) cannot be used in {role}")
        return kind

    def values(self, condition: MetadataCondition) -> list[Any]:
        """The condition's values in the column's Python type (None: a range's open end), for
        an engine that evaluates the condition itself (service/engine/milvus/scorer.py)."""
        return [None if s is None else s.as_py() for s in self._scalars(condition)]

    def check(self, conditions: Sequence[MetadataCondition]) -> None:
        """QueryError naming the field of the first condition the engine cannot evaluate."""
        for condition in conditions:
            self._scalars(condition)

    def rows(self, conditions: Sequence[MetadataCondition]) -> np.ndarray:
        """Sorted int64 rows meeting every condition (checked first: QueryError)."""
        key = tuple(conditions)
        self.check(key)
        if key in self._rows:
            self._rows.move_to_end(key)
            return self._rows[key]
        mask: pa.ChunkedArray | None = None
        for condition in key:
            test = self._mask(condition)
            mask = test if mask is None else pc.and_(mask, test)
        assert mask is not None
        values = pc.fill_null(mask, False).to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(values).astype(np.int64)
        rows.setflags(write=False)
        self._rows[key] = rows
        if len(self._rows) > CACHE_ENTRIES:
            self._rows.popitem(last=False)
        return rows

    def group_keys(self, name: str) -> tuple[np.ndarray, list[str]]:
        """(a code per row, −1 where null; the distinct values as text) of a column."""
        self.check_field(name, "group_by")
        if name not in self._groups:
            column = self.column(name)
            if not pa.types.is_string(column.type):
                column = column.cast(pa.string())
            encoded = pc.dictionary_encode(column.combine_chunks())
            codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
            self._groups[name] = (codes.astype(np.int64), encoded.dictionary.to_pylist())
        return self._groups[name]

    # --- one condition ---

    def _mask(self, condition: MetadataCondition) -> pa.ChunkedArray:
        column = self.column(condition.field)
        scalars = self._scalars(condition)
        if condition.equals is not None:
            return pc.equal(column, scalars[0])
        if condition.any_of is not None:
            return pc.is_in(column, value_set=pa.array([s.as_py() for s in scalars], column.type))
        assert condition.range is not None
        low, high = scalars
        tests = []
        if low is not None:
            compare = pc.greater if condition.range.min_exclusive else pc.greater_equal
            tests.append(compare(column, low))
        if high is not None:
            compare = pc.less if condition.range.max_exclusive else pc.less_equal
            tests.append(compare(column, high))
        mask = tests[0]
        for test in tests[1:]:
            mask = pc.and_(mask, test)
        return mask

    def _scalars(self, condition: MetadataCondition) -> list[pa.Scalar | None]:
        """The condition's values as scalars of the column's type (None: an open end)."""
        name = condition.field
        kind = self.check_field(name, "where")
        tests = condition.tests
        if len(tests) != 1:
            what = "no test" if not tests else " and ".join(tests)
            raise QueryError(
                f"the condition on {echo(name)} has {what}; give one of equals, any_of or range"
            )
        column_type = self.column(name).type
        if condition.equals is not None:
            return [_scalar(name, kind, column_type, condition.equals)]
        if condition.any_of is not None:
            if not condition.any_of:
                raise QueryError(f"the any_of condition on {echo(name)} lists no values")
            return [_scalar(name, kind, column_type, v) for v in condition.any_of]
        assert condition.range is not None
        span = condition.range
        if span.min is None and span.max is None:
            raise QueryError(f"the range on {echo(name)} sets neither min nor max")
        if kind == "bool":
            raise QueryError(f"metadata field {echo(name)} is bool: test it with equals")
        return [
            None if end is None else _scalar(name, kind, column_type, end)
            for end in (span.min, span.max)
        ]


def _scalar(name: str, kind: str, column_type: pa.DataType, value: MetadataScalar) -> pa.Scalar:
    """`value` as a scalar of the column's type; QueryError naming the field when it is not
    of the column's condition type or does not fit it."""
    given = type(value).__name__
    wrong = QueryError(
        f"metadata field {echo(name)} is {kind}; got {given} {echo(str(value))}"
        + (" (ISO-8601 text expected)" if kind in ("timestamp", "date") else "")
    )
    native: object
    if kind == "string":
        if not isinstance(value, str):
            raise wrong
        native = value
    elif kind == "bool":
        if not isinstance(value, bool):
            raise wrong
        native = value
    elif kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong
        native = value
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise wrong
        native = float(value)
    else:
        if not isinstance(value, str):
            raise wrong
        native = _parse_time(value, kind, column_type, wrong)
    try:
        return pa.scalar(native, type=column_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        raise QueryError(
            f"{echo(str(value))} does not fit metadata field {echo(name)} ({column_type})"
        ) from None


def _parse_time(text: str, kind: str, column_type: pa.DataType, wrong: QueryError) -> object:
    """An ISO-8601 date or timestamp; a naive time on a zoned column is taken as UTC, a zoned
    one on a naive column converted to UTC."""
    try:
        if kind == "date":
            return dt.date.fromisoformat(text.strip())
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise wrong from None
    zoned = getattr(column_type, "tz", None) is not None
    if zoned and moment.tzinfo is None:
        return moment.replace(tzinfo=dt.UTC)
    if not zoned and moment.tzinfo is not None:
        return moment.astimezone(dt.UTC).replace(tzinfo=None)
    return moment
