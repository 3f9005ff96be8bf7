"""What the deploy tests share: paths, the metric catalogue, a PromQL reference extractor, and
the command lines the manifests and the Dockerfile run."""

from __future__ import annotations

import copy
import functools
import json
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from indexer.verify.faults import FAULT_KINDS

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
PROMETHEUS = DEPLOY / "prometheus"
DASHBOARD = DEPLOY / "grafana" / "strata.json"
DOCKERFILE = DEPLOY / "Dockerfile"

# The Kubernetes versions the manifests are validated against: the oldest they support (native
# gRPC probes are GA in 1.27) and the newest kubernetes-validate 1.37 ships schemas for.
KUBERNETES_VERSIONS = ("1.27.0", "1.37.0")

GRPC_PORT = 50051
METRICS_PORT = 9100
HEALTH_SERVICE = "strata.v1.SearchService"
IMAGE = "registry.example.com/strata"

_RPC = frozenset({"grpc_type", "grpc_service", "grpc_method"})
# Every series the dashboards and alerts may use (service/serving/metrics.py exports them), with its
# labels; `le` on the histograms' buckets.
METRICS: dict[str, frozenset[str]] = {
    "grpc_server_started_total": _RPC,
    "grpc_server_handled_total": _RPC | {"grpc_code"},
    "grpc_server_handling_seconds_bucket": _RPC | {"le"},
    "strata_search_seconds_bucket": frozenset({"granularity", "le"}),
    "strata_encoder_batch_size_bucket": frozenset({"modality", "le"}),
    "strata_encoder_seconds_bucket": frozenset({"modality", "le"}),
    "strata_query_cache_requests_total": frozenset({"tier", "result"}),
    "strata_redis_up": frozenset(),
    "strata_bundle_version": frozenset(),
    "strata_bundle_rows": frozenset(),
    "strata_bundle_bytes": frozenset(),
    "strata_hot_swaps_total": frozenset({"result"}),
    "strata_bundle_refused_total": frozenset({"reason"}),
    "strata_serving": frozenset(),
    "strata_queue_depth": frozenset(),
}
# Prometheus's own series about each target.
PROMETHEUS_SERIES: dict[str, frozenset[str]] = {"up": frozenset()}
# Labels every scraped series carries (prometheus.yml's relabelling and static labels).
TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod", "component"})
# The values a label may be matched against with `=` where the set is closed.
LABEL_VALUES: dict[tuple[str, str], frozenset[str]] = {
    ("strata_query_cache_requests_total", "tier"): frozenset({"local", "redis"}),
    ("strata_query_cache_requests_total", "result"): frozenset({"hit", "miss"}),
    ("strata_hot_swaps_total", "result"): frozenset({"ok", "failed"}),
    ("strata_bundle_refused_total", "reason"): frozenset(FAULT_KINDS),
    ("grpc_server_handling_seconds_bucket", "grpc_type"): frozenset({"unary"}),
}


def promtool() -> str:
    """The promtool binary; fails (never skips) without it: CI installs it (.ci/run)."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool not found on PATH: install Debian's prometheus package "
            "(apt-get install -y --no-install-recommends prometheus), as .ci/run does"
        )
    return path


def venv_tool(name: str, install_hint: str) -> str:
    """A console script of this environment (beside the running python), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: {install_hint}")
    return path


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def manifest_files() -> list[Path]:
    """Every Kubernetes object file in deploy/k8s (kustomization.yaml is kustomize's own)."""
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


@functools.cache
def _parsed_k8s_objects() -> tuple[tuple[Path, dict[str, Any]], ...]:
    return tuple((path, doc) for path in manifest_files() for doc in load_yaml_documents(path))


def k8s_objects() -> list[tuple[Path, dict[str, Any]]]:
    """(file, object) of every object in deploy/k8s (copies: callers may change them)."""
    return copy.deepcopy(list(_parsed_k8s_objects()))


def find_object(kind: str, name: str) -> dict[str, Any]:
    found = [
        doc for _, doc in k8s_objects() if doc["kind"] == kind and doc["metadata"]["name"] == name
    ]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod template's spec of a Deployment, Job or CronJob."""
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows' nested panels included, rows themselves left out."""
    panels = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            panels.extend(panel.get("panels", []))
        else:
            panels.append(panel)
    return panels


def dashboard_expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target, and the selectors inside templating queries."""
    found = []
    for panel in dashboard_panels(dashboard):
        for target in panel.get("targets", []):
            found.append((f"panel {panel['title']!r} {target['refId']}", target["expr"]))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        query = query["query"] if isinstance(query, dict) else query
        match = re.fullmatch(r"\s*label_values\((.+),\s*([A-Za-z_]\w*)\s*\)\s*", query)
        assert match, f"variable {variable['name']}: only label_values(selector, label) is used"
        found.append((f"variable {variable['name']}", match.group(1)))
    return found


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def grafana_to_promql(expr: str) -> str:
    """A dashboard expression with Grafana's variables replaced, so Prometheus can parse it."""
    expr = re.sub(r"\$__(rate_)?interval\b|\$\{__(rate_)?interval\}", "5m", expr)
    return re.sub(r"\$\{?[A-Za-z_]\w*\}?", ".*", expr)


# --- PromQL references ---------------------------------------------------------------------

_STRING = r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`'
_IDENT = r"(?<![\w:.])[A-Za-z_:][\w:]*"
_SELECTOR = re.compile(r"(?<![\w:])([A-Za-z_:][\w:]*)?\s*\{((?:[^{}\"]|\"(?:[^\"\\]|\\.)*\")*)\}")
_MATCHER = re.compile(r"\s*([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*(\"(?:[^\"\\]|\\.)*\")\s*(?:,|$)")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
    | {"and", "or", "unless", "atan2", "inf", "nan", "Inf", "NaN"}
)


@dataclass
class PromqlRefs:
    """What one expression refers to."""

    metrics: set[str] = field(default_factory=set)
    # (metric or None, label, operator, value)
    matchers: list[tuple[str | None, str, str, str]] = field(default_factory=list)
    grouping_labels: set[str] = field(default_factory=set)


def promql_refs(expr: str) -> PromqlRefs:
    """The metric names, label matchers and grouping labels of a PromQL expression.

    Not a parser: enough of the grammar for the expressions deploy/ writes (selectors,
    functions, aggregations with by/without, vector matching, ranges, offsets, numbers)."""
    refs = PromqlRefs()
    for match in _SELECTOR.finditer(expr):
        metric, body = match.group(1), match.group(2)
        position = 0
        while position < len(body.rstrip()):
            matcher = _MATCHER.match(body, position)
            assert matcher, f"cannot read the label matchers {body!r} in {expr!r}"
            label, operator, value = matcher.groups()
            refs.matchers.append((metric, label, operator, json.loads(value)))
            position = matcher.end()
    rest = re.sub(_STRING, '""', expr)
    rest = re.sub(r"\{[^{}]*\}", " ", rest)  # the matchers, read above
    rest = re.sub(r"\[[^\[\]]*\]", " ", rest)  # ranges and subqueries
    for clause in _GROUPING.finditer(rest):
        refs.grouping_labels |= {x.strip() for x in clause.group(2).split(",") if x.strip()}
    rest = _GROUPING.sub(" ", rest)
    rest = re.sub(r"\boffset\s+-?\w+", " ", rest)
    for ident in re.finditer(_IDENT, rest):
        name = ident.group(0)
        after = rest[ident.end() :].lstrip()
        if name in _KEYWORDS or after.startswith("("):  # a keyword or a function
            continue
        refs.metrics.add(name)
    # a selector without a name ({__name__=...}) would escape the check above
    refs.metrics |= {m for m, _, _, _ in refs.matchers if m}
    return refs


def reference_problems(where: str, expr: str) -> list[str]:
    """Every metric, label or label value `expr` names that the catalogue above lacks."""
    known = {**METRICS, **PROMETHEUS_SERIES}
    all_labels = TARGET_LABELS.union(*known.values())
    refs = promql_refs(expr)
    problems = [f"{where}: unknown metric {m!r}" for m in sorted(refs.metrics - known.keys())]
    if not refs.metrics:
        problems.append(f"{where}: names no metric: {expr!r}")
    for metric, label, operator, value in refs.matchers:
        if metric is None:
            problems.append(f"{where}: a selector without a metric name: {expr!r}")
        elif metric in known and label not in known[metric] | TARGET_LABELS:
            problems.append(f"{where}: {metric} has no label {label!r}")
        allowed = LABEL_VALUES.get((metric or "", label))
        if allowed is not None and operator == "=" and value not in allowed:
            problems.append(f"{where}: {metric}{{{label}={value!r}}}: not one of {sorted(allowed)}")
    problems += [
        f"{where}: groups by unknown label {label!r}"
        for label in sorted(refs.grouping_labels - all_labels)
    ]
    return problems


# --- command lines -------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments out."""
    logical, current = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if current and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            logical.append(current.strip())
            current = ""
    instructions = []
    for text in logical:
        keyword, _, arguments = text.partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
    return instructions


def dockerfile_exec_form(instruction: str) -> list[str]:
    """The JSON (exec form) argument list of the last ENTRYPOINT or CMD."""
    values = [args for keyword, args in dockerfile_instructions() if keyword == instruction]
    assert values, f"the Dockerfile has no {instruction}"
    parsed = json.loads(values[-1])
    assert isinstance(parsed, list), f"{instruction} must use the exec (JSON) form"
    return parsed


def shell_commands(script: str) -> list[list[str]]:
    """The simple commands of a shell script: split at newlines, ;, &&, || and |."""
    separators = ";&|\n"  # newlines separate commands too: not whitespace here
    lexer = shlex.shlex(script.replace("\\\n", " "), posix=True, punctuation_chars=separators)
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    commands, current = [], []
    for token in lexer:
        if set(token) <= set(separators):
            if current:
                commands.append(current)
            current = []
        else:
            current.append(token)
    if current:
        commands.append(current)
    return commands


def strata_command_lines() -> list[tuple[str, list[str]]]:
    """(where, argv after `strata`) of every strata invocation in the manifests and the image."""
    entrypoint = dockerfile_exec_form("ENTRYPOINT")
    found = [("Dockerfile ENTRYPOINT + CMD", entrypoint[1:] + dockerfile_exec_form("CMD"))]
    for path, obj in k8s_objects():
        if obj["kind"] not in {"Deployment", "CronJob", "Job", "StatefulSet", "DaemonSet"}:
            continue
        for container in pod_spec(obj)["containers"]:
            if not container["image"].startswith(IMAGE):
                continue
            where = f"{path.name} {obj['kind']}/{obj['metadata']['name']} {container['name']}"
            command = container.get("command", entrypoint)
            args = [str(a) for a in container.get("args", [])]
            if command[:2] in (["/bin/sh", "-c"], ["sh", "-c"], ["/bin/bash", "-c"]):
                script = (command[2:] + args)[0]
                lines = [argv for argv in shell_commands(script) if argv[0] == "strata"]
                assert lines, f"{where}: the script runs no strata command"
                found += [(where, argv[1:]) for argv in lines]
            else:
                assert command[0] == "strata", f"{where}: runs {command[0]!r}, not strata"
                found.append((where, command[1:] + args))
    return found
