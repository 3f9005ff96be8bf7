"""Milvus filter expressions and search parameters, from the engine's own filters and settings.

A concept filter becomes `array_contains_any(concepts, [...])` (AND over required references,
`not …` for excluded ones); metadata conditions become comparisons typed by the version's own
metadata table; a FAISS ParameterSpace setting becomes Milvus search parameters. Pure
functions: service/engine/milvus/scorer.py runs them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from indexer.milvus.store import CONCEPTS, ROW
from service.engine.metadata_filter import MetadataFilter
from service.results import MetadataCondition


def concept_expression(
    required: Sequence[Sequence[int]], excluded: Sequence[int], field: str = CONCEPTS
) -> str:
    """The Milvus filter of a concept filter: rows holding one of each required reference's
    concepts and none of the excluded ones ("" when there is no filter)."""
    parts = [f"array_contains_any({field}, {sorted(set(map(int, r)))})" for r in required]
    if excluded:
        parts.append(f"not array_contains_any({field}, {sorted(set(map(int, excluded)))})")
    return " and ".join(f"({p})" for p in parts)


def rows_expression(rows: Sequence[int] | np.ndarray, negate: bool = False) -> str:
    """The Milvus filter allowing exactly `rows` (with `negate`, every row but them): a zero-shot
    phrase's rows, made beside the engine (service/engine/open_vocabulary.py)."""
    if len(rows) == 0:  # `row in []` is no expression Milvus takes
        return "" if negate else f"{ROW} < 0"
    listed = ", ".join(str(int(r)) for r in rows)
    return f"{'not ' if negate else ''}{ROW} in [{listed}]"


def literal(value: Any) -> str:
    """A Python value as a Milvus expression literal (times and dates as the ISO text the
    export stores them as)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if hasattr(value, "isoformat"):
        return string_literal(value.isoformat())
    return string_literal(str(value))


def where_expression(metadata: MetadataFilter, conditions: Sequence[MetadataCondition]) -> str:
    """The Milvus filter of metadata conditions, all of which must hold ("" for none); each is
    checked and typed by the bundle's own table first (QueryError naming the field). A null
    value meets no comparison in Milvus, as in the local filter."""
    parts = []
    for condition in conditions:
        values, name = metadata.values(condition), condition.field
        if condition.equals is not None:
            parts.append(f"{name} == {literal(values[0])}")
        elif condition.any_of is not None:
            parts.append(f"{name} in [{', '.join(literal(v) for v in values)}]")
        else:
            assert condition.range is not None
            low, high = values
            span, tests = condition.range, []
            if low is not None:
                tests.append(f"{name} {'>' if span.min_exclusive else '>='} {literal(low)}")
            if high is not None:
                tests.append(f"{name} {'<' if span.max_exclusive else '<='} {literal(high)}")
            parts.append(" and ".join(tests))
    return " and ".join(f"({p})" for p in parts)


def engine_params(setting: str) -> dict[str, Any]:
    """Milvus search parameters of a FAISS ParameterSpace setting ("efSearch=64" → ef 64;
    nprobe as it is); what Milvus has no counterpart for is dropped."""
    params: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in setting.split(","))):
        key, _, value = part.partition("=")
        if key == "efSearch":
            params["ef"] = int(value)
        elif key == "nprobe":
            params["nprobe"] = int(value)
    return params


def string_literal(value: str) -> str:
    """A Milvus expression's string literal (double quotes, JSON escapes)."""
    return json.dumps(value)
