"""The seeded fuzz of malformed requests, small: a real server answers every kind with an
expected status, counts every call in its metrics, and still answers the good query."""

from __future__ import annotations

from service.api.background import BackgroundServer
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from tests.robustness.fuzz import run_fuzz
from tests.robustness.fuzz_requests import KINDS, Target, draw_requests

TARGET = Target(dim=384, concepts=768, metadata_fields=("caption",), rows=300)
ALWAYS_INVALID = (
    "text_empty",
    "text_huge",
    "image_random",
    "vector_nonfinite",
    "query_unset",
    "raw_random",
)


def test_the_requests_are_a_function_of_the_seed():
    first, again = draw_requests(120, 0, TARGET), draw_requests(120, 0, TARGET)
    assert first == again
    assert draw_requests(120, 1, TARGET) != first
    assert {r.kind for r in first} == set(KINDS)  # every kind, equally often
    assert {r.method for r in first} == {
        "Search",
        "BatchSearch",
        "Explain",
        "ListConcepts",
        "GetConcept",
    }


def test_a_small_fuzz_finds_the_server_sound(engine: SearchEngine):
    with BackgroundServer(engine, ServerConfig(port=0)) as running:
        report = run_fuzz(running.target, requests=300, seed=0, max_seconds=60, concurrency=4)
        registry = running.server.metrics.registry
        handled = sum(
            sample.value
            for family in registry.collect()
            if family.name == "grpc_server_handled"
            for sample in family.samples
            if sample.name.endswith("_total")
            and sample.labels["grpc_service"] == "strata.v1.SearchService"
        )
        assert running.server.serving  # alive and SERVING after the fuzz
    assert report["sent"] == 300 and not report["stopped_by_time"]
    assert report["unexpected"] == {} and report["ok"], report["unexpected"]
    assert report["after"] == {"health": "SERVING", "good_query_same_hits": True}
    assert set(report["kinds"]) == set(KINDS)
    assert sum(sum(codes.values()) for codes in report["kinds"].values()) == 300
    for kind in ALWAYS_INVALID:
        assert set(report["kinds"][kind]) == {"INVALID_ARGUMENT"}, (kind, report["kinds"][kind])
    assert report["kinds"]["good"] == {"OK": report["kinds"]["good"]["OK"]}
    assert report["codes"]["INVALID_ARGUMENT"] > 150 and report["codes"]["OK"] > 30
    # the interceptor counted every call: the fuzz's, plus GetIndexInfo and the good query
    # before and after
    assert handled == 300 + 3
