"""The fuzz's requests: each KIND drawn from a seeded `random.Random`, the same seed giving the
same requests (tests/robustness/fuzz.py sends them).

A kind is a mutation of a good SearchRequest (empty, huge or random text; random bytes as an
image; vectors of random dimension, with NaN/Inf, or of extreme magnitude; random enum
integers, top_k, concept references and metadata fields; a Query with no kind set or two kinds
on the wire; metadata conditions `where` — known and unknown fields, values of every kind,
any_of up to one past its limit, ranges, no test, one condition past the limit; `group_by`
and `group_size`; a search `plan` of random kind, shortlist prefix and factor; `min_recall`
at and past (0, 1], NaN and Inf), a BatchSearch of mutated requests, a BatchSearch of every
size from 0 to one past the limit (`batch_size`), a mutated Explain, ListConcepts or
GetConcept, or raw bytes (random, truncated or bit-flipped serializations).
"""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass

from service._generated.strata.v1 import search_pb2 as pb
from service.limits import LIMITS

WORDS = (
    "a", "dog", "red", "cat", "chasing", "ball", "on", "the", "beach", "man", "riding", "horse",
    "in", "park", "two", "children", "blue", "car", "white", "bird", "while", "who", ",", ".",
)  # fmt: skip


@dataclass(frozen=True)
class Target:
    """What the generators need to know of the served bundle."""

    dim: int
    concepts: int
    metadata_fields: tuple[str, ...]
    rows: int


@dataclass(frozen=True)
class FuzzRequest:
    kind: str
    method: str
    payload: bytes


# --- generators: each draws one request of its kind ---------------------------------------------


def _int32(rng: random.Random) -> int:
    edges = (0, 1, -1, 2**31 - 1, -(2**31), 1000, 1001, 6, 7, 5)
    return rng.choice(edges) if rng.random() < 0.3 else rng.randint(-(2**31), 2**31 - 1)


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))


def _unicode(rng: random.Random, length: int) -> str:
    chars = []
    while len(chars) < length:
        code = rng.choice(
            (rng.randint(0, 0x7F), rng.randint(0x80, 0xFFFF), rng.randint(0, 0x10FFFF))
        )
        if not 0xD800 <= code <= 0xDFFF:  # proto strings are UTF-8: no lone surrogates
            chars.append(chr(code))
    return "".join(chars)


def _good(rng: random.Random) -> pb.SearchRequest:
    return pb.SearchRequest(
        query=pb.Query(text=_text(rng)), granularity=rng.randint(0, 6), top_k=rng.randint(1, 20)
    )


def _float32(value: float) -> float:
    """`value` as the nearest float32 (what the wire carries)."""
    return struct.unpack("f", struct.pack("f", value))[0] if math.isfinite(value) else value


def _vector(rng: random.Random, dim: int, scale: Callable[[], float]) -> pb.Query:
    return pb.Query(vector=pb.FloatVector(values=[_float32(scale()) for _ in range(dim)]))


def _ref(rng: random.Random, t: Target) -> pb.ConceptRef:
    which = rng.randrange(4)
    if which == 0:
        return pb.ConceptRef(id=rng.randrange(t.concepts) if rng.random() < 0.5 else _int32(rng))
    if which == 1:
        sign = rng.choice("+-")
        number = rng.randrange(t.concepts // 2) if rng.random() < 0.5 else _int32(rng)
        return pb.ConceptRef(label=rng.choice((f"{sign}{number}", _unicode(rng, 4), "", "+")))
    if which == 2:
        return pb.ConceptRef(name=rng.choice((rng.choice(WORDS), _unicode(rng, 6), "")))
    return pb.ConceptRef()


def search_mutation(kind: str, rng: random.Random, t: Target) -> pb.SearchRequest:
    """A SearchRequest of one of the SEARCH_KINDS."""
    request = _good(rng)
    if kind == "good":
        pass
    elif kind == "text_empty":
        request.query.text = rng.choice(("", " ", "\n\t ", "\u3000", "\u00a0" * 3))
    elif kind == "text_huge":
        request.query.text = "dog " * rng.randint(501, 20_000)
    elif kind == "text_random":
        request.query.text = _unicode(rng, rng.randint(1, 300))
    elif kind == "image_random":
        request.query.image = rng.randbytes(rng.randint(0, 4096))
    elif kind == "vector_dim":
        dim = rng.choice((0, 1, t.dim - 1, t.dim + 1, rng.randint(0, 4 * t.dim)))
        request.query.CopyFrom(_vector(rng, dim, lambda: rng.gauss(0, 1)))
    elif kind == "vector_nonfinite":
        query = _vector(rng, t.dim, lambda: rng.gauss(0, 1))
        for _ in range(rng.randint(1, 5)):
            position = rng.randrange(t.dim)
            query.vector.values[position] = rng.choice((math.nan, math.inf, -math.inf))
        request.query.CopyFrom(query)
    elif kind == "vector_extreme":
        exponent = rng.choice((rng.uniform(-45, -20), rng.uniform(20, 38), 0.0))
        request.query.CopyFrom(_vector(rng, t.dim, lambda: rng.gauss(0, 1) * 10**exponent))
    elif kind == "granularity_int":
        request.granularity = _int32(rng)
    elif kind == "top_k_int":
        request.top_k = _int32(rng)
    elif kind == "concepts":
        for _ in range(rng.randint(1, 4)):
            rng.choice((request.filter.require, request.filter.exclude)).append(_ref(rng, t))
    elif kind == "metadata":
        pool = [*t.metadata_fields, "id", "", _unicode(rng, 5), rng.choice(WORDS)]
        request.metadata_fields.extend(rng.choice(pool) for _ in range(rng.randint(1, 5)))
        request.explain = rng.random() < 0.5
    elif kind == "query_unset":
        request.ClearField("query")
    elif kind == "where":
        count = rng.choice((1, 1, 2, 4, LIMITS.conditions, LIMITS.conditions + 1))
        request.where.extend(_condition(rng, t) for _ in range(count))
    elif kind == "group_by":
        if rng.random() < 0.9:
            request.group_by = rng.choice(_field_pool(rng, t))
        if rng.random() < 0.7:
            request.group_size = rng.choice((0, 1, 2, 100, 101, _int32(rng)))
    elif kind == "plan":
        prefixes = (t.dim // 16, t.dim // 8, t.dim // 4, t.dim // 2, t.dim)
        request.plan.kind = rng.choice((0, 1, 2, 3, _int32(rng)))
        if rng.random() < 0.6:
            request.plan.shortlist_prefix = rng.choice((0, *prefixes, _int32(rng)))
        if rng.random() < 0.6:
            request.plan.factor = rng.choice((0, 1, 10, 1000, 1001, _int32(rng)))
        request.granularity = rng.choice((0, 4, 5, 6, rng.randint(0, 6)))
    elif kind == "min_recall":
        request.min_recall = rng.choice(
            (0.0, 1.0, 0.5, 0.9, 0.99, 1.0001, -1.0, 1e-45, math.nan, math.inf, rng.random())
        )
    else:
        raise ValueError(f"unknown search kind {kind!r}")
    return request


def _field_pool(rng: random.Random, t: Target) -> list[str]:
    return [*t.metadata_fields, "id", "", _unicode(rng, 5), rng.choice(WORDS)]


def _value(rng: random.Random) -> pb.MetadataValue:
    """A metadata value of a random kind (of the column's type or not)."""
    which = rng.randrange(5)
    if which == 0:
        return pb.MetadataValue(text=rng.choice((rng.choice(WORDS), _unicode(rng, 6), "", "1")))
    if which == 1:
        wide = rng.randint(-(2**63), 2**63 - 1)
        return pb.MetadataValue(integer=rng.choice((0, 1, -1, rng.randint(-1000, 1000), wide)))
    if which == 2:
        return pb.MetadataValue(number=rng.choice((0.5, -1e300, math.nan, math.inf, rng.random())))
    if which == 3:
        return pb.MetadataValue(flag=rng.random() < 0.5)
    return pb.MetadataValue()  # no kind set


def _condition(rng: random.Random, t: Target) -> pb.MetadataCondition:
    """A metadata condition: a field (known or not) and a test of random values, or none."""
    condition = pb.MetadataCondition(field=rng.choice(_field_pool(rng, t)))
    test = rng.randrange(4)
    if test == 0:
        condition.equals.CopyFrom(_value(rng))
    elif test == 1:
        count = rng.choice((0, 1, 3, LIMITS.condition_values, LIMITS.condition_values + 1))
        condition.any_of.values.extend(_value(rng) for _ in range(count))
    elif test == 2:
        if rng.random() < 0.8:
            condition.range.min.CopyFrom(_value(rng))
        if rng.random() < 0.8:
            condition.range.max.CopyFrom(_value(rng))
        condition.range.min_exclusive = rng.random() < 0.3
        condition.range.max_exclusive = rng.random() < 0.3
    return condition  # test 3: no test at all


SEARCH_KINDS = (
    "good", "text_empty", "text_huge", "text_random", "image_random", "vector_dim",
    "vector_nonfinite", "vector_extreme", "granularity_int", "top_k_int", "concepts", "metadata",
    "query_unset", "where", "group_by", "plan", "min_recall",
)  # fmt: skip


def _oneof_clash(rng: random.Random, t: Target) -> bytes:
    """A Query carrying two kinds on the wire (text and vector or image; the parser keeps the
    last), as a serialized SearchRequest."""
    parts = [
        pb.Query(text=_text(rng)).SerializeToString(),
        _vector(rng, rng.choice((t.dim, 3)), lambda: rng.gauss(0, 1)).SerializeToString(),
        pb.Query(image=rng.randbytes(16)).SerializeToString(),
    ]
    rng.shuffle(parts)
    query = b"".join(parts[: rng.randint(2, 3)])
    return pb.SearchRequest(top_k=3).SerializeToString() + b"\x0a" + _varint(len(query)) + query


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _bitflip(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return rng.randbytes(8)
    flipped = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
    return bytes(flipped)


BATCH_TEXTS = tuple(f"{a} {b}" for a in WORDS[:8] for b in WORDS[8:16])  # 64: the cache holds them


def _sized_batch(rng: random.Random, t: Target) -> pb.BatchSearchRequest:
    """A BatchSearch of any size from 0 to one past the limit (the edges more often), of good
    requests with now and then one mutated request at a random position."""
    most = LIMITS.batch_requests
    size = rng.choice((0, 1, 2, most - 1, most, most + 1, rng.randint(0, most)))
    requests = [
        pb.SearchRequest(query=pb.Query(text=rng.choice(BATCH_TEXTS)), top_k=rng.randint(1, 5))
        for _ in range(size)
    ]
    if requests and rng.random() < 0.3:
        cheap = [k for k in SEARCH_KINDS if k not in ("text_huge", "text_random")]
        requests[rng.randrange(size)] = search_mutation(rng.choice(cheap), rng, t)
    return pb.BatchSearchRequest(requests=requests)


def draw(kind: str, rng: random.Random, t: Target) -> FuzzRequest:
    """One request of `kind` (one of KINDS)."""
    if kind in SEARCH_KINDS:
        return FuzzRequest(kind, "Search", search_mutation(kind, rng, t).SerializeToString())
    if kind == "oneof_clash":
        return FuzzRequest(kind, "Search", _oneof_clash(rng, t))
    if kind == "raw_random":
        return FuzzRequest(kind, "Search", rng.randbytes(rng.randint(0, 512)))
    if kind == "raw_truncated":
        whole = search_mutation(rng.choice(SEARCH_KINDS[:4]), rng, t).SerializeToString()
        return FuzzRequest(kind, "Search", whole[: rng.randint(0, max(0, len(whole) - 1))])
    if kind == "raw_bitflip":
        whole = _good(rng).SerializeToString()
        method = rng.choice(("Search", "Explain", "GetConcept", "ListConcepts", "BatchSearch"))
        return FuzzRequest(kind, method, _bitflip(rng, whole))
    if kind == "batch":
        if rng.random() < 0.05:  # oversize: one request more than allowed
            size = LIMITS.batch_requests + 1
            requests = [pb.SearchRequest(query=pb.Query(text="a dog"), top_k=1)] * size
        else:
            cheap = [k for k in SEARCH_KINDS if k not in ("good", "text_huge", "text_random")]
            requests = [
                search_mutation(rng.choice(cheap), rng, t) for _ in range(rng.randint(0, 12))
            ]
        return FuzzRequest(
            kind, "BatchSearch", pb.BatchSearchRequest(requests=requests).SerializeToString()
        )
    if kind == "batch_size":
        return FuzzRequest(kind, "BatchSearch", _sized_batch(rng, t).SerializeToString())
    if kind == "explain":
        request = pb.ExplainRequest(query=search_mutation(rng.choice(SEARCH_KINDS), rng, t).query)
        which = rng.randrange(3)
        if which == 0:
            request.row = rng.choice((rng.randrange(t.rows), rng.randint(-(2**63), 2**63 - 1)))
        elif which == 1:
            request.item_id = rng.choice(("", _unicode(rng, 8), "scene-0000001", "x" * 5000))
        if rng.random() < 0.5:
            request.near_captions = rng.choice((0, 1, 3, 20, 21, -1, _int32(rng)))
        return FuzzRequest(kind, "Explain", request.SerializeToString())
    if kind == "list_concepts":
        request = pb.ListConceptsRequest(
            page_size=_int32(rng),
            page_token=rng.choice(("", str(rng.randint(0, 2 * t.concepts)), _unicode(rng, 4))),
            name_contains=rng.choice(("", rng.choice(WORDS), _unicode(rng, 3))),
        )
        return FuzzRequest(kind, "ListConcepts", request.SerializeToString())
    if kind == "get_concept":
        request = pb.GetConceptRequest()
        if rng.random() < 0.8:
            request.concept.CopyFrom(_ref(rng, t))
        return FuzzRequest(kind, "GetConcept", request.SerializeToString())
    raise ValueError(f"unknown kind {kind!r}")


KINDS = (
    *SEARCH_KINDS, "oneof_clash", "raw_random", "raw_truncated", "raw_bitflip", "batch",
    "batch_size", "explain", "list_concepts", "get_concept",
)  # fmt: skip


def draw_requests(count: int, seed: int, t: Target) -> list[FuzzRequest]:
    """`count` requests, kinds in turn (every kind equally often), contents from `seed`."""
    rng = random.Random(seed)
    kinds = [KINDS[i % len(KINDS)] for i in range(count)]
    rng.shuffle(kinds)
    return [draw(kind, rng, t) for kind in kinds]
