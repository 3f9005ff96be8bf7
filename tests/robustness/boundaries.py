"""Every RPC at its boundaries, against a live server: each documented bound (service/limits.py,
and the ranges the proto states) sent at the bound and just past it, with the status code it
must get; BatchSearch at every size the issue named (0, 1, 2, 256 and 257, one past the limit).

The cases are a function of what the server says it serves (GetIndexInfo: rows, concepts,
metadata columns), so the same table runs on the test gallery and on any bundle. A case passes
when its code is the expected one (and an OK BatchSearch holds one response per request); the
report lists every case with its code, the BatchSearch size table (size → code)
and the mismatches.

tests/service/api/test_boundaries.py runs `run_boundaries(target)` against a real server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import Message

from service._generated.strata.v1 import search_pb2 as pb
from service._generated.strata.v1 import search_pb2_grpc
from service.limits import LIMITS
from service.results import MAX_GROUP_SIZE

OK, INVALID, NOT_FOUND = "OK", "INVALID_ARGUMENT", "NOT_FOUND"
BATCH_SIZES = (0, 1, 2, LIMITS.batch_requests, LIMITS.batch_requests + 1)
TOP_K_MAX = 1000
SHORTLIST_MAX = 100_000  # top_k × funnel factor at most
CALL_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Served:
    """What the cases need to know of the served bundle."""

    rows: int
    concepts: int
    text_column: str | None  # a metadata column of strings, for where and group_by


@dataclass(frozen=True)
class Case:
    rpc: str
    name: str
    request: Message
    expected: str  # the status code's name


def _dog(**fields: Any) -> pb.SearchRequest:
    return pb.SearchRequest(query=pb.Query(text="a dog"), **fields)


def _batch(size: int) -> pb.BatchSearchRequest:
    texts = ("a dog", "a red car", "a man riding a horse", "a cat")
    return pb.BatchSearchRequest(
        requests=[
            pb.SearchRequest(query=pb.Query(text=f"{texts[i % 4]} {i}"), top_k=1)
            for i in range(size)
        ]
    )


def _equals(field: str, value: str) -> pb.MetadataCondition:
    return pb.MetadataCondition(field=field, equals=pb.MetadataValue(text=value))


def search_cases(s: Served) -> list[Case]:
    funnel, full = pb.PLAN_KIND_FUNNEL, pb.GRANULARITY_FULL
    cases = [
        Case("Search", "top_k 1", _dog(top_k=1), OK),
        Case("Search", f"top_k {TOP_K_MAX}", _dog(top_k=TOP_K_MAX), OK),
        Case("Search", "top_k 0", _dog(top_k=0), INVALID),
        Case("Search", f"top_k {TOP_K_MAX + 1}", _dog(top_k=TOP_K_MAX + 1), INVALID),
        Case("Search", f"text of {LIMITS.text_chars} characters",
             pb.SearchRequest(query=pb.Query(text="d" * LIMITS.text_chars)), OK),
        Case("Search", f"text of {LIMITS.text_chars + 1} characters",
             pb.SearchRequest(query=pb.Query(text="d" * (LIMITS.text_chars + 1))), INVALID),
        Case("Search", f"explain, top_k {LIMITS.explain_hits}",
             _dog(top_k=LIMITS.explain_hits, explain=True), OK),
        Case("Search", f"explain, top_k {LIMITS.explain_hits + 1}",
             _dog(top_k=LIMITS.explain_hits + 1, explain=True), INVALID),
        Case("Search", "min_recall 1", _dog(min_recall=1.0), OK),
        Case("Search", "min_recall 0", _dog(min_recall=0.0), INVALID),
        Case("Search", "min_recall 1.0001", _dog(min_recall=1.0001), INVALID),
        Case("Search", "funnel factor 1000, top_k 100 (shortlist 100,000)",
             _dog(top_k=SHORTLIST_MAX // 1000, granularity=full,
                  plan=pb.SearchPlan(kind=funnel, factor=1000)), OK),
        Case("Search", "funnel factor 1000, top_k 101",
             _dog(top_k=SHORTLIST_MAX // 1000 + 1, granularity=full,
                  plan=pb.SearchPlan(kind=funnel, factor=1000)), INVALID),
        Case("Search", "funnel factor 1001", _dog(plan=pb.SearchPlan(factor=1001)), INVALID),
        Case("Search", "plan kind 3 (outside the enum)", _dog(plan=pb.SearchPlan(kind=3)), INVALID),
        Case("Search", "granularity 6 (AUTO)", _dog(granularity=6), OK),
        Case("Search", "granularity 7", _dog(granularity=7), INVALID),
        Case("Search", f"{LIMITS.concept_refs} concept references",
             _dog(filter=pb.ConceptFilter(exclude=[pb.ConceptRef(id=i)
                                                   for i in range(LIMITS.concept_refs)])), OK),
        Case("Search", f"{LIMITS.concept_refs + 1} concept references",
             _dog(filter=pb.ConceptFilter(exclude=[pb.ConceptRef(id=i)
                                                   for i in range(LIMITS.concept_refs + 1)])),
             INVALID),
        Case("Search", f"concept id {s.concepts - 1} (the last)",
             _dog(filter=pb.ConceptFilter(exclude=[pb.ConceptRef(id=s.concepts - 1)])), OK),
        Case("Search", f"concept id {s.concepts}",
             _dog(filter=pb.ConceptFilter(exclude=[pb.ConceptRef(id=s.concepts)])), INVALID),
        Case("Search", f"{LIMITS.metadata_fields} metadata fields",
             _dog(metadata_fields=["id"] * LIMITS.metadata_fields), OK),
        Case("Search", f"{LIMITS.metadata_fields + 1} metadata fields",
             _dog(metadata_fields=["id"] * (LIMITS.metadata_fields + 1)), INVALID),
    ]  # fmt: skip
    column = s.text_column
    if column is not None:
        most = LIMITS.conditions
        values = [pb.MetadataValue(text=f"v{i}") for i in range(LIMITS.condition_values + 1)]
        cases += [
            Case("Search", f"where: {most} conditions", _dog(where=[_equals(column, "x")] * most),
                 OK),
            Case("Search", f"where: {most + 1} conditions",
                 _dog(where=[_equals(column, "x")] * (most + 1)), INVALID),
            Case("Search", f"where: any_of of {LIMITS.condition_values} values",
                 _dog(where=[pb.MetadataCondition(field=column, any_of=pb.MetadataValues(
                     values=values[:-1]))]), OK),
            Case("Search", f"where: any_of of {LIMITS.condition_values + 1} values",
                 _dog(where=[pb.MetadataCondition(field=column, any_of=pb.MetadataValues(
                     values=values))]), INVALID),
            Case("Search", "where: an empty test", _dog(where=[pb.MetadataCondition(field=column)]),
                 INVALID),
            Case("Search", "group_size 1", _dog(group_by=column, group_size=1), OK),
            Case("Search", f"group_size {MAX_GROUP_SIZE}",
                 _dog(group_by=column, group_size=MAX_GROUP_SIZE, top_k=2), OK),
            Case("Search", "group_size 0", _dog(group_by=column, group_size=0), INVALID),
            Case("Search", f"group_size {MAX_GROUP_SIZE + 1}",
                 _dog(group_by=column, group_size=MAX_GROUP_SIZE + 1), INVALID),
            Case("Search", "group_size without group_by", _dog(group_size=2), INVALID),
        ]  # fmt: skip
    return cases


def other_cases(s: Served) -> list[Case]:
    dog, ids = pb.Query(text="a dog"), LIMITS.id_chars
    return [
        *(
            Case("BatchSearch", f"{n} requests", _batch(n),
                 OK if n <= LIMITS.batch_requests else INVALID)
            for n in BATCH_SIZES
        ),
        Case("BatchSearch", "2 requests, the second bad",
             pb.BatchSearchRequest(requests=[_dog(), _dog(top_k=0)]), INVALID),
        Case("Explain", "row 0", pb.ExplainRequest(query=dog, row=0), OK),
        Case("Explain", f"row {s.rows - 1} (the last)",
             pb.ExplainRequest(query=dog, row=s.rows - 1), OK),
        Case("Explain", "row -1", pb.ExplainRequest(query=dog, row=-1), NOT_FOUND),
        Case("Explain", f"row {s.rows}", pb.ExplainRequest(query=dog, row=s.rows), NOT_FOUND),
        Case("Explain", "near_captions 0", pb.ExplainRequest(query=dog, row=0, near_captions=0),
             OK),
        Case("Explain", f"near_captions {LIMITS.near_captions}",
             pb.ExplainRequest(query=dog, row=0, near_captions=LIMITS.near_captions), OK),
        Case("Explain", f"near_captions {LIMITS.near_captions + 1}",
             pb.ExplainRequest(query=dog, row=0, near_captions=LIMITS.near_captions + 1), INVALID),
        Case("Explain", "near_captions -1", pb.ExplainRequest(query=dog, row=0, near_captions=-1),
             INVALID),
        Case("Explain", f"item id of {ids} characters",
             pb.ExplainRequest(query=dog, item_id="i" * ids), NOT_FOUND),
        Case("Explain", f"item id of {ids + 1} characters",
             pb.ExplainRequest(query=dog, item_id="i" * (ids + 1)), INVALID),
        Case("ListConcepts", "page_size 0 (the default)", pb.ListConceptsRequest(page_size=0), OK),
        Case("ListConcepts", "page_size 1", pb.ListConceptsRequest(page_size=1), OK),
        Case("ListConcepts", "page_size 1000", pb.ListConceptsRequest(page_size=1000), OK),
        Case("ListConcepts", "page_size -1", pb.ListConceptsRequest(page_size=-1), INVALID),
        Case("ListConcepts", "page_size 1001", pb.ListConceptsRequest(page_size=1001), INVALID),
        Case("ListConcepts", f"name_contains of {LIMITS.lookup_chars} characters",
             pb.ListConceptsRequest(name_contains="n" * LIMITS.lookup_chars), OK),
        Case("ListConcepts", f"name_contains of {LIMITS.lookup_chars + 1} characters",
             pb.ListConceptsRequest(name_contains="n" * (LIMITS.lookup_chars + 1)), INVALID),
        Case("ListConcepts", f"page_token {s.concepts} (the end: an empty page)",
             pb.ListConceptsRequest(page_token=str(s.concepts)), OK),
        Case("ListConcepts", f"page_token {s.concepts + 1} (past the end)",
             pb.ListConceptsRequest(page_token=str(s.concepts + 1)), INVALID),
        Case("GetConcept", "id 0", pb.GetConceptRequest(concept=pb.ConceptRef(id=0)), OK),
        Case("GetConcept", f"id {s.concepts - 1} (the last)",
             pb.GetConceptRequest(concept=pb.ConceptRef(id=s.concepts - 1)), OK),
        Case("GetConcept", f"id {s.concepts}",
             pb.GetConceptRequest(concept=pb.ConceptRef(id=s.concepts)), NOT_FOUND),
        Case("GetConcept", "id -1", pb.GetConceptRequest(concept=pb.ConceptRef(id=-1)), NOT_FOUND),
        Case("GetConcept", f"name of {LIMITS.ref_chars + 1} characters",
             pb.GetConceptRequest(concept=pb.ConceptRef(name="n" * (LIMITS.ref_chars + 1))),
             INVALID),
        Case("GetIndexInfo", "the empty request", pb.GetIndexInfoRequest(), OK),
    ]  # fmt: skip


def served(stub: search_pb2_grpc.SearchServiceStub) -> Served:
    info = stub.GetIndexInfo(pb.GetIndexInfoRequest(), timeout=CALL_TIMEOUT_S)
    text = next(
        (f.name for f in info.metadata_schema if "string" in f.type and f.name != "id"), None
    )
    return Served(int(info.rows), int(info.concepts), text)


def outcome(call: Callable[..., Any], request: Message) -> tuple[str, str, Any]:
    """(code name, details, the response or None)."""
    try:
        return OK, "", call(request, timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as exc:
        return exc.code().name, exc.details() or "", None


def run_boundaries(target: str) -> dict[str, Any]:
    """Every case against the server at `target`: a JSON-ready report (module docstring)."""
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    with grpc.insecure_channel(target, options=options) as channel:
        stub = search_pb2_grpc.SearchServiceStub(channel)
        s = served(stub)
        rows, mismatches, sizes = [], [], {}
        for case in [*search_cases(s), *other_cases(s)]:
            code, details, response = outcome(getattr(stub, case.rpc), case.request)
            row: dict[str, Any] = {
                "rpc": case.rpc,
                "case": case.name,
                "code": code,
                "expected": case.expected,
            }
            wrong = code != case.expected
            if case.rpc == "BatchSearch":
                asked = len(case.request.requests)  # type: ignore[attr-defined]
                if case.name.endswith(" requests"):
                    sizes[asked] = code
                if response is not None:  # one response per request
                    row["responses"] = len(response.responses)
                    wrong = wrong or len(response.responses) != asked
            if details:
                row["details"] = details[:160]
            if wrong:
                mismatches.append(row)
            rows.append(row)
    return {
        "benchmark": "rpc_boundaries",
        "target": target,
        "served": {"rows": s.rows, "concepts": s.concepts, "text_column": s.text_column},
        "cases": rows,
        "batch_sizes": {str(n): sizes.get(n) for n in BATCH_SIZES},
        "mismatches": mismatches,
        "ok": not mismatches,
    }
