"""How much work one request may ask for: the documented limits (docs/reference/limits.md#limits),
each refused with INVALID_ARGUMENT (`QueryError`) before any work is done.

    concept references   64 per query (require + exclude together), each id, label or name
                         at most 128 characters
    metadata fields      32 per query, each name at most 128 characters
    metadata conditions  32 per query (`where`), an any_of at most 1,000 values, a text value
                         at most 1,000 characters
    explain              a search with explain returns at most 100 hits (top_k ≤ 100)
    BatchSearch          256 requests per call
    ids                  an Explain item id at most 256 characters
    descriptions         an Explain's near_captions at most 20 (0: none, no search)
    text                 a text query at most 2,000 characters
    catalog look-ups     ListConcepts `name_contains` and `page_token`, a GetConcept name:
                         at most 128 characters
    message              4 MiB per request message (gRPC refuses more: RESOURCE_EXHAUSTED)

With these, the work of one query is bounded whatever it holds: a filter's references resolve
to at most 2·D concepts, and their postings are merged into one row mask
(service/engine/filtering.py) whose cost is bounded by the postings' size (N·k entries), not by how
often a concept is named; top_k ≤ 1000 bounds the hits and what explain computes per hit.

The checks are pure functions of the values; `echo` is the one way a status message quotes
what a caller sent (a short prefix, and the full length when it was cut).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ConfigDict

from service.errors import QueryError, echo
from training.core.config import ConfigModel

MAX_REQUEST_BYTES = 4 * 2**20  # the server's gRPC receive limit per request message


class RequestLimits(ConfigModel):
    """The limits of one request (module docstring); the engine and the servicer share one."""

    model_config = ConfigDict(frozen=True)

    concept_refs: int = 64
    ref_chars: int = 128
    metadata_fields: int = 32
    field_chars: int = 128
    conditions: int = 32
    condition_values: int = 1000
    value_chars: int = 1000
    explain_hits: int = 100
    batch_requests: int = 256
    id_chars: int = 256
    near_captions: int = 20
    text_chars: int = 2000
    lookup_chars: int = 128


LIMITS = RequestLimits()


def check_count(what: str, count: int, most: int) -> None:
    """QueryError when `count` items of `what` exceed `most`."""
    if count > most:
        raise QueryError(f"{count} {what}; at most {most}")


def check_chars(what: str, value: str, most: int) -> None:
    """QueryError (quoting a prefix) when a string is longer than `most` characters."""
    if len(value) > most:
        raise QueryError(f"{what} of {len(value)} characters ({echo(value)}); at most {most}")


def check_near_captions(count: int, limits: RequestLimits = LIMITS) -> None:
    """An Explain's near_captions: in [0, limits.near_captions]."""
    if not 0 <= count <= limits.near_captions:
        raise QueryError(
            f"near_captions must lie in [0, {limits.near_captions}] (0: none), got {count}"
        )


def check_filter(refs: Sequence[object], limits: RequestLimits = LIMITS) -> None:
    """A filter's references: how many, and each name or label's length."""
    check_count("concept references (require + exclude)", len(refs), limits.concept_refs)
    for ref in refs:
        for value in (getattr(ref, "name", None), getattr(ref, "label", None)):
            if isinstance(value, str):
                check_chars("a concept reference", value, limits.ref_chars)


def check_fields(fields: Sequence[str], limits: RequestLimits = LIMITS) -> None:
    check_count("metadata fields", len(fields), limits.metadata_fields)
    for name in fields:
        check_chars("a metadata field name", name, limits.field_chars)


def check_conditions(conditions: Sequence[object], limits: RequestLimits = LIMITS) -> None:
    """Metadata conditions: how many, each field name's length, an any_of's values and each
    text value's length."""
    check_count("metadata conditions", len(conditions), limits.conditions)
    for condition in conditions:
        check_chars(
            "a metadata field name", str(getattr(condition, "field", "")), limits.field_chars
        )
        values = list(getattr(condition, "any_of", None) or ())
        check_count("values in one any_of", len(values), limits.condition_values)
        span = getattr(condition, "range", None)
        values += [getattr(condition, "equals", None)]
        values += [getattr(span, "min", None), getattr(span, "max", None)] if span else []
        for value in values:
            if isinstance(value, str):
                check_chars("a metadata value", value, limits.value_chars)
