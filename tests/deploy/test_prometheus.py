"""deploy/prometheus: promtool accepts the scrape configuration and the rules, the rules' unit
tests pass, and the scrape configuration reads the annotations the Deployment sets."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_support import (
    METRICS_PORT,
    PROMETHEUS,
    alert_rules,
    find_object,
    promtool,
)

REQUIRED_ALERTS = {
    "StrataHighErrorRatio",
    "StrataHighLatencyP99",
    "StrataRedisDown",
    "StrataHotSwapFailed",
    "StrataBundleVersionSkew",
    "StrataNotServing",
    "StrataQueueSaturated",
    "StrataTargetDown",
}
# Prometheus's pod-role discovery: the options a kubernetes_sd_configs entry may have.
KUBERNETES_SD_KEYS = {
    "role",
    "namespaces",
    "selectors",
    "api_server",
    "kubeconfig_file",
    "attach_metadata",
    "basic_auth",
    "authorization",
    "oauth2",
    "tls_config",
    "proxy_url",
    "follow_redirects",
    "enable_http2",
}
KUBERNETES_SD_ROLES = {"node", "service", "pod", "endpoints", "endpointslice", "ingress"}


def run_promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def scrape_config() -> dict[str, Any]:
    return yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())


@pytest.mark.slow
def test_promtool_checks_rules() -> None:
    result = run_promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


@pytest.mark.slow
def test_promtool_rule_unit_tests_pass() -> None:
    result = run_promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_rule_unit_tests_cover_the_main_alerts() -> None:
    tests = yaml.safe_load((PROMETHEUS / "alerts_test.yml").read_text())
    assert tests["rule_files"] == ["alerts.yml"]
    fired = {
        case["alertname"]
        for test in tests["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert len(fired) >= 3
    assert {"StrataHighErrorRatio", "StrataRedisDown", "StrataBundleVersionSkew"} <= fired
    assert fired <= {rule["alert"] for rule in alert_rules()}


@pytest.mark.slow
def test_promtool_checks_the_scrape_configuration(tmp_path: Path) -> None:
    """`promtool check config prometheus.yml`. Debian's prometheus package (what CI installs)
    is built without Kubernetes service discovery and refuses `kubernetes_sd_configs` as an
    unknown field; with that build, the Kubernetes blocks are checked here against the
    documented options and promtool checks the rest on a copy in which each of them is
    replaced by a file_sd_configs block."""
    result = run_promtool("check", "config", "prometheus.yml")
    if result.returncode == 0:
        assert "SUCCESS" in result.stdout
        return
    output = result.stdout + result.stderr
    if "field kubernetes_sd_configs not found" not in output:
        pytest.fail(f"promtool check config failed:\n{output}")
    config = scrape_config()
    for job in config["scrape_configs"]:
        for sd in job.pop("kubernetes_sd_configs", []):
            assert set(sd) <= KUBERNETES_SD_KEYS, f"{job['job_name']}: {sorted(sd)}"
            assert sd["role"] in KUBERNETES_SD_ROLES
            assert set(sd.get("namespaces", {})) <= {"names", "own_namespace"}
            job.setdefault("file_sd_configs", []).append({"files": [str(tmp_path / "*.json")]})
    config["rule_files"] = [str(PROMETHEUS / name) for name in config["rule_files"]]
    copy = tmp_path / "prometheus.yml"
    copy.write_text(yaml.safe_dump(config, sort_keys=False))
    result = run_promtool("check", "config", str(copy), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_scrape_configuration_reads_the_deployments_annotations() -> None:
    jobs = {job["job_name"]: job for job in scrape_config()["scrape_configs"]}
    assert set(jobs) == {"strata", "strata-local"}
    (sd,) = jobs["strata"]["kubernetes_sd_configs"]
    assert sd["role"] == "pod"
    deployment = find_object("Deployment", "strata-search")
    assert sd["namespaces"]["names"] == [deployment["metadata"]["namespace"]]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    relabel = jobs["strata"]["relabel_configs"]
    sources = {label for rule in relabel for label in rule.get("source_labels", [])}
    for annotation in annotations:
        if annotation.startswith("prometheus.io/"):
            meta = "__meta_kubernetes_pod_annotation_" + re.sub(r"[^\w]", "_", annotation)
            assert meta in sources, f"{annotation} is not read"
    keep = relabel[0]
    assert keep["action"] == "keep" and keep["regex"] == annotations["prometheus.io/scrape"]
    targets = {rule.get("target_label") for rule in relabel}
    assert {"__address__", "__metrics_path__", "namespace", "pod"} <= targets
    # the address rewrite turns any discovered address into pod-IP:annotated-port
    (rewrite,) = [r for r in relabel if r.get("target_label") == "__address__"]
    address = f"10.1.2.3:{50051};{annotations['prometheus.io/port']}"
    assert re.sub(rewrite["regex"], rewrite["replacement"].replace("$", "\\"), address) == (
        f"10.1.2.3:{METRICS_PORT}"
    )
    (static,) = jobs["strata-local"]["static_configs"]
    assert static["targets"] == [f"127.0.0.1:{METRICS_PORT}"]
    assert {"namespace", "pod"} <= set(static["labels"])


def test_alerts_cover_the_required_conditions() -> None:
    rules = alert_rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    assert set(names) >= REQUIRED_ALERTS
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        # only the two Strata jobs of prometheus.yml
        assert 'job=~"strata|strata-local"' in rule["expr"], rule["alert"]
    by_name = {rule["alert"]: rule for rule in rules}
    error_ratio = by_name["StrataHighErrorRatio"]["expr"]
    assert 'grpc_code!~"OK|INVALID_ARGUMENT|NOT_FOUND"' in error_ratio
    assert "[5m]" in error_ratio
    latency = by_name["StrataHighLatencyP99"]["expr"]
    assert "by (namespace, grpc_service, grpc_method, le)" in latency
    assert by_name["StrataRedisDown"]["for"] == "5m"
    assert by_name["StrataBundleVersionSkew"]["for"] == "15m"
