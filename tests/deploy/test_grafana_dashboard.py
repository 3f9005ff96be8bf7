"""deploy/grafana/strata.json: a dashboard Grafana can import with any Prometheus data source,
with the panels the runbook relies on, whose queries Prometheus can parse."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from deploy_support import (
    dashboard_expressions,
    dashboard_panels,
    grafana_to_promql,
    load_dashboard,
    promql_refs,
    promtool,
)

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRAFANA = {"type": "grafana", "uid": "-- Grafana --"}


def test_dashboard_uses_the_templated_datasource() -> None:
    dashboard = load_dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "pod"):
        assert variables[name]["datasource"] == DATASOURCE
    panels = dashboard_panels(dashboard)
    for panel in panels:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    # no other data source is named anywhere (an import would keep a dangling uid); the
    # built-in annotation query uses Grafana's own
    named = list(datasources(dashboard))
    assert named and all(d in (DATASOURCE, GRAFANA) for d in named)


def datasources(node: object) -> Iterator[object]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield value
            yield from datasources(value)
    elif isinstance(node, list):
        for item in node:
            yield from datasources(item)


def test_dashboard_layout_is_well_formed() -> None:
    dashboard = load_dashboard()
    assert dashboard["uid"] and dashboard["title"] == "Strata"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        # filtered by the dashboard's variables
        for target in panel["targets"]:
            assert 'namespace=~"$namespace"' in target["expr"], panel["title"]


def test_dashboard_has_the_required_panels() -> None:
    panels = {p["title"]: p for p in dashboard_panels(load_dashboard())}

    def metrics(title: str) -> set[str]:
        return set().union(*(promql_refs(t["expr"]).metrics for t in panels[title]["targets"]))

    def grouping(title: str) -> set[str]:
        return set().union(
            *(promql_refs(t["expr"]).grouping_labels for t in panels[title]["targets"])
        )

    qps = "Requests per second by method and code"
    assert metrics(qps) == {"grpc_server_handled_total"}
    assert {"grpc_method", "grpc_code"} <= grouping(qps)
    for title, metric, by in (
        ("Latency p50 / p99 by method", "grpc_server_handling_seconds_bucket", "grpc_method"),
        ("Search latency p50 / p99 by granularity", "strata_search_seconds_bucket", "granularity"),
        (
            "Encoder batch size p50 / p99 by modality",
            "strata_encoder_batch_size_bucket",
            "modality",
        ),
        ("Encoder latency p50 / p99 by modality", "strata_encoder_seconds_bucket", "modality"),
    ):
        exprs = [t["expr"] for t in panels[title]["targets"]]
        assert metrics(title) == {metric}
        assert by in grouping(title)
        assert any(e.startswith("histogram_quantile(0.5,") for e in exprs), title
        assert any(e.startswith("histogram_quantile(0.99,") for e in exprs), title
    assert metrics("Query cache hit ratio by tier") == {"strata_query_cache_requests_total"}
    assert "tier" in grouping("Query cache hit ratio by tier")
    assert metrics("Redis up") == {"strata_redis_up"}
    assert metrics("Bundle version per pod") == {"strata_bundle_version"}
    assert "{{pod}}" in panels["Bundle version per pod"]["targets"][0]["legendFormat"]
    assert metrics("Hot swaps") == {"strata_hot_swaps_total", "strata_bundle_refused_total"}
    assert metrics("Queue depth per pod") == {"strata_queue_depth"}


@pytest.mark.slow
def test_dashboard_queries_parse(tmp_path: Path) -> None:
    """Every query (Grafana's variables filled in) as a recording rule: `promtool check rules`
    parses each with Prometheus's own PromQL parser."""
    expressions = dashboard_expressions(load_dashboard())
    rules = [
        {"record": f"dashboard:query_{i}", "expr": grafana_to_promql(expr)}
        for i, (_, expr) in enumerate(expressions)
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool(), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout
