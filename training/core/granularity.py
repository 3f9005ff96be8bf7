"""Granularities and the contract that maps each to a prefix length of the rotated space.

The default contract (docs/explanation/granularity.md#the-contract): object D/16, attribute D/8,
relation D/4, caption D/2, full D (for 384-d MiniLM: 24/48/96/192/384). A contract is configurable
per artifact, but it must be strictly increasing in the order below and end at D.

`parse_granularity` is the one reading of a granularity a user wrote (the service's queries and
requests, a bundle's `prefix_length`); its `GranularityError` has one message, which each stage
maps to its own error type.
"""

from __future__ import annotations

from enum import StrEnum
from itertools import pairwise

from training.core.errors import InputError, echo


class Granularity(StrEnum):
    OBJECT = "object"
    ATTRIBUTE = "attribute"
    RELATION = "relation"
    CAPTION = "caption"
    FULL = "full"


ORDER = tuple(Granularity)
AUTO = "auto"  # a query's granularity left to the router (service/query/routing.py)
DEFAULT_FRACTIONS = {
    Granularity.OBJECT: 16,
    Granularity.ATTRIBUTE: 8,
    Granularity.RELATION: 4,
    Granularity.CAPTION: 2,
    Granularity.FULL: 1,
}

Contract = dict[Granularity, int]


class GranularityError(InputError):
    """A granularity that is none of the names (nor AUTO, where AUTO is allowed)."""


def granularity_choices(*, auto: bool) -> tuple[str, ...]:
    """The names a user may write: AUTO first where it is allowed, then ORDER."""
    return ((AUTO,) if auto else ()) + tuple(g.value for g in ORDER)


def parse_granularity(value: object, *, auto: bool) -> Granularity | None:
    """A granularity from what a user wrote ('object', ' Caption ', Granularity.OBJECT), case and
    surrounding blanks ignored. With `auto`, AUTO or an empty value gives None (the router
    chooses). Anything else raises GranularityError: "unknown granularity 'x'; choose from …"."""
    text = str(value).strip().lower()
    if auto and text in ("", AUTO):
        return None
    try:
        return Granularity(text)
    except ValueError:
        choices = ", ".join(granularity_choices(auto=auto))
        raise GranularityError(
            f"unknown granularity {echo(value)}; choose from {choices}"
        ) from None


def default_contract(dim: int) -> Contract:
    """D/16, D/8, D/4, D/2, D (rounded down); needs D >= 16 so that every prefix is distinct."""
    if dim < 16:
        raise InputError(f"the default contract needs a dimension of at least 16, got {dim}")
    return validate_contract({g: dim // d for g, d in DEFAULT_FRACTIONS.items()}, dim)


def validate_contract(contract: dict[str, int] | Contract, dim: int) -> Contract:
    """A contract keyed by Granularity, strictly increasing in granularity order, ending at dim."""
    try:
        parsed = {Granularity(str(k)): int(v) for k, v in contract.items()}
    except ValueError as exc:
        raise InputError(f"bad granularity contract {contract}: {exc}") from exc
    missing = [g.value for g in ORDER if g not in parsed]
    if missing:
        raise InputError(f"granularity contract lacks {', '.join(missing)}")
    lengths = [parsed[g] for g in ORDER]
    if lengths[0] < 1 or any(a >= b for a, b in pairwise(lengths)):
        raise InputError(f"prefix lengths must be positive and strictly increasing, got {lengths}")
    if lengths[-1] != dim:
        raise InputError(f"the full prefix must equal the dimension {dim}, got {lengths[-1]}")
    return {g: parsed[g] for g in ORDER}


def previous_prefix(contract: Contract, granularity: Granularity) -> int:
    """The prefix length just before `granularity`'s (0 before the object prefix)."""
    index = ORDER.index(granularity)
    return contract[ORDER[index - 1]] if index > 0 else 0
