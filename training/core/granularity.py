"""Granularities and the contract that maps each to a prefix length of the rotated space.

The default contract (docs/concepts/granularity.md#the-contract): object D/16, attribute D/8,
relation D/4, caption D/2, full D (for 384-d MiniLM: 24/48/96/192/384). A contract is configurable
per artifact, but it must be strictly increasing in the order below and end at D.
"""

from __future__ import annotations

from enum import StrEnum
from itertools import pairwise

from training.core.errors import InputError


class Granularity(StrEnum):
    OBJECT = "object"
    ATTRIBUTE = "attribute"
    RELATION = "relation"
    CAPTION = "caption"
    FULL = "full"


ORDER = tuple(Granularity)
DEFAULT_FRACTIONS = {
    Granularity.OBJECT: 16,
    Granularity.ATTRIBUTE: 8,
    Granularity.RELATION: 4,
    Granularity.CAPTION: 2,
    Granularity.FULL: 1,
}

Contract = dict[Granularity, int]


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
