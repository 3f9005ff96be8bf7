"""/metrics of a real server: series counted from real calls, checked by promtool."""

from __future__ import annotations

import math
import shutil
import subprocess
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient, StrataClientError
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.query.cache import QueryCache
from service.serving.metrics import ServerMetrics

SEARCH = "strata.v1.SearchService"


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        return response.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """(sample name, labels) → value."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: dict, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def rpc(method: str, service: str = SEARCH, **more: str) -> dict[str, str]:
    return {"grpc_type": "unary", "grpc_service": service, "grpc_method": method, **more}


def test_metrics_endpoint_counts_real_calls(engine: SearchEngine, server: BackgroundServer):
    config = ServerConfig(port=0, metrics_port=0)
    with BackgroundServer(engine, config) as running, StrataClient(running.target) as client:
        port = running.server.metrics_port
        assert port and port != running.port
        texts = ["a metrics zebra", "a metrics heron", "a metrics walrus"]
        for text in texts:
            assert client.search(text, granularity="object", k=3).hits
        assert client.search("a metrics heron on a metrics rock", granularity="full", k=2).hits
        with pytest.raises(StrataClientError):
            client.search(" ")  # INVALID_ARGUMENT, raised by context.abort
        with pytest.raises(StrataClientError):
            client.get_concept("no-such-concept-anywhere")  # NOT_FOUND
        with grpc.insecure_channel(running.target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        # a search on another server in the same process counts there, not here
        with StrataClient(server.target) as other:
            other.search("a metrics otter", granularity="object", k=1)
        found = samples(scrape(port))

    assert value(found, "grpc_server_started_total", **rpc("Search")) == 5
    assert value(found, "grpc_server_handled_total", **rpc("Search", grpc_code="OK")) == 4
    invalid = rpc("Search", grpc_code="INVALID_ARGUMENT")
    assert value(found, "grpc_server_handled_total", **invalid) == 1
    not_found = rpc("GetConcept", grpc_code="NOT_FOUND")
    assert value(found, "grpc_server_handled_total", **not_found) == 1
    assert value(found, "grpc_server_handling_seconds_count", **rpc("Search")) == 5
    health_ok = rpc("Check", service="grpc.health.v1.Health", grpc_code="OK")
    assert value(found, "grpc_server_handled_total", **health_ok) == 1
    # every SearchService method has its series from the start
    assert ("grpc_server_started_total", frozenset(rpc("Explain").items())) in found

    assert value(found, "strata_search_seconds_count", granularity="object") == 3
    assert value(found, "strata_search_seconds_count", granularity="full") == 1
    assert value(found, "strata_search_seconds_count", granularity="caption") == 0
    assert value(found, "strata_search_seconds_sum", granularity="object") > 0
    # 4 texts reached the encoder (the empty one was refused before it); the other server's
    # search, on the same engine and encoder, is not among them
    assert value(found, "strata_encoder_batch_size_sum", modality="text") == 4
    assert value(found, "strata_encoder_seconds_count", modality="text") >= 1
    assert value(found, "strata_encoder_batch_size_count", modality="image") == 0

    assert value(found, "strata_bundle_version") == 1
    assert value(found, "strata_bundle_rows") == 300
    assert value(found, "strata_bundle_bytes") > 100_000
    assert value(found, "strata_serving") == 1
    assert value(found, "strata_queue_depth") == 0
    assert value(found, "strata_hot_swaps_total", result="ok") == 0
    assert ("strata_hot_swaps_total", frozenset({("result", "failed")})) in found
    for tier in ("local", "redis"):
        for result in ("hit", "miss"):
            key = (
                "strata_query_cache_requests_total",
                frozenset({"tier": tier, "result": result}.items()),
            )
            assert key in found
    assert math.isnan(found[("strata_redis_up", frozenset())])  # no Redis configured


def test_promtool_accepts_the_exposition(engine: SearchEngine):
    promtool = shutil.which("promtool")
    assert promtool is not None, (
        "promtool not found on PATH: install Debian's prometheus package (.ci/run does)"
    )
    config = ServerConfig(port=0, metrics_port=0)
    with BackgroundServer(engine, config) as running, StrataClient(running.target) as client:
        client.search("a promtool dog", k=2)
        with pytest.raises(StrataClientError):
            client.search("a dog", k=0)
        text = scrape(running.server.metrics_port)
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "strata_search_seconds_bucket" in text and "grpc_server_handled_total" in text


def test_feeds_reach_the_metrics_they_are_given(engine: SearchEngine):
    metrics = ServerMetrics()
    cache = QueryCache(size=4, metrics=metrics)  # no Redis: strata_redis_up is NaN
    running = BackgroundServer(engine, ServerConfig(port=0), metrics=metrics).start()
    registry = running.server.metrics.registry
    assert running.server.metrics is metrics
    try:
        assert cache.lookup("an-encoder", 4, ["a text"]) == [None]
        metrics.record_cache("redis", hit=False, count=2)
        metrics.set_redis_up(True)
        metrics.record_hot_swap(ok=False)
        get = registry.get_sample_value
        assert get("strata_query_cache_requests_total", {"tier": "local", "result": "miss"}) == 1
        assert get("strata_query_cache_requests_total", {"tier": "redis", "result": "miss"}) == 2
        assert get("strata_redis_up") == 1
        assert get("strata_hot_swaps_total", {"result": "failed"}) == 1
        cache.report_state()
        assert math.isnan(get("strata_redis_up"))
        metrics.set_redis_up(False)
        assert get("strata_redis_up") == 0
        with pytest.raises(ValueError, match="cache tier 'disk'"):
            metrics.record_cache("disk", hit=True)
        assert get("strata_serving") == 1
    finally:
        running.stop()
        cache.close()
    assert registry.get_sample_value("strata_serving") == 0
    other = ServerMetrics()  # another server's metrics: the cache's counts are not there
    assert (
        other.registry.get_sample_value(
            "strata_query_cache_requests_total", {"tier": "local", "result": "miss"}
        )
        == 0
    )


def test_a_busy_metrics_port_is_a_clear_error(engine: SearchEngine):
    first = BackgroundServer(engine, ServerConfig(port=0, metrics_port=0)).start()
    try:
        taken = first.server.metrics_port
        second = BackgroundServer(engine, ServerConfig(port=0, metrics_port=taken))
        with pytest.raises(Exception, match=f"cannot serve metrics on 127.0.0.1:{taken}"):
            second.start()
        second.stop(grace=0)
    finally:
        first.stop()
