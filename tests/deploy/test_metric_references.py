"""The dashboard and the alert rules name only series the service exports (and `up`), with
labels those series have; and that catalogue is what service/serving/metrics.py really registers."""

from __future__ import annotations

import pytest
from deploy_support import (
    METRICS,
    alert_rules,
    dashboard_expressions,
    load_dashboard,
    promql_refs,
    reference_problems,
)


def test_extractor_reads_metrics_labels_and_grouping() -> None:
    refs = promql_refs(
        'sum by (grpc_method, le) (rate(grpc_server_handling_seconds_bucket{job=~"a|b",'
        ' grpc_code!="OK", x="{y}"}[5m] offset 1h)) / on (namespace) group_left (pod)'
        " max without (instance) (up) > bool 0.5 and strata_serving == 1e-3"
    )
    assert refs.metrics == {"grpc_server_handling_seconds_bucket", "up", "strata_serving"}
    assert refs.grouping_labels == {"grpc_method", "le", "namespace", "pod", "instance"}
    assert refs.matchers == [
        ("grpc_server_handling_seconds_bucket", "job", "=~", "a|b"),
        ("grpc_server_handling_seconds_bucket", "grpc_code", "!=", "OK"),
        ("grpc_server_handling_seconds_bucket", "x", "=", "{y}"),
    ]


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("rate(strata_search_seconds_count[5m])", "unknown metric 'strata_search_seconds_count'"),
        ("sum by (grpc_status) (grpc_server_handled_total)", "unknown label 'grpc_status'"),
        ('strata_serving{granularity="object"}', "strata_serving has no label 'granularity'"),
        ('strata_hot_swaps_total{result="fail"}', "not one of ['failed', 'ok']"),
        ('{__name__="strata_serving"}', "a selector without a metric name"),
        ("vector(1)", "names no metric"),
    ],
)
def test_reference_check_catches(expr: str, problem: str) -> None:
    problems = reference_problems("test", expr)
    assert any(problem in p for p in problems), problems


def test_dashboard_names_only_known_series() -> None:
    expressions = dashboard_expressions(load_dashboard())
    assert len(expressions) >= 15
    problems = [p for where, expr in expressions for p in reference_problems(where, expr)]
    assert not problems, "\n".join(problems)


def test_alerts_name_only_known_series() -> None:
    problems = [
        p for rule in alert_rules() for p in reference_problems(rule["alert"], rule["expr"])
    ]
    assert not problems, "\n".join(problems)


def test_dashboard_shows_every_series() -> None:
    used = set().union(
        *(promql_refs(e).metrics for _, e in dashboard_expressions(load_dashboard()))
    )
    assert set(METRICS) <= used, f"not on the dashboard: {sorted(set(METRICS) - used)}"


def test_catalogue_matches_what_the_service_exports() -> None:
    """Every series in the catalogue exists in a fresh ServerMetrics registry with exactly the
    catalogue's labels (so a rename in service/serving/metrics.py fails here, not in production)."""
    from service.serving.metrics import ServerMetrics

    metrics = ServerMetrics()
    try:
        metrics.preset_methods("strata.v1.SearchService", [("Search", "unary")])
        metrics.set_bundle(7, 100, 1000)
        exported: dict[str, set[frozenset[str]]] = {}
        for family in metrics.registry.collect():
            for sample in family.samples:
                exported.setdefault(sample.name, set()).add(frozenset(sample.labels))
    finally:
        metrics.close()
    for name, labels in METRICS.items():
        assert name in exported, f"service/serving/metrics.py exports no {name}"
        assert exported[name] == {labels}, f"{name}: {exported[name]} vs {labels}"
