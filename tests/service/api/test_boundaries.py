"""Every RPC at its boundaries through a real server (tests/robustness/boundaries.py's
table): each bound answered at the bound and refused just past it with the documented code, and a
BatchSearch of every size the limits allow (0, 1, 2, 256) answered OK with one response per request,
one past the limit (257) refused INVALID_ARGUMENT."""

from __future__ import annotations

from service.api.background import BackgroundServer
from tests.robustness.boundaries import run_boundaries


def test_every_rpc_is_answered_as_documented_at_its_boundaries(server: BackgroundServer):
    report = run_boundaries(server.target)
    assert report["mismatches"] == [], report["mismatches"]
    assert report["batch_sizes"] == {
        "0": "OK",
        "1": "OK",
        "2": "OK",
        "256": "OK",
        "257": "INVALID_ARGUMENT",
    }
    sizes = {
        row["case"]: row.get("responses") for row in report["cases"] if row["rpc"] == "BatchSearch"
    }
    assert sizes["0 requests"] == 0 and sizes["1 requests"] == 1 and sizes["256 requests"] == 256
    assert report["served"]["text_column"] == "caption"  # where and group_by were covered
    cases = {row["case"] for row in report["cases"]}
    assert {"where: 33 conditions", "group_size 101", "min_recall 0"} <= cases
    assert {row["rpc"] for row in report["cases"]} == {
        "Search",
        "BatchSearch",
        "Explain",
        "ListConcepts",
        "GetConcept",
        "GetIndexInfo",
    }
