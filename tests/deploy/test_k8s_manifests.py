"""deploy/k8s: schema-valid for the supported Kubernetes versions, and consistent with the
service (ports, probes, CLI options, settings) and with each other (labels, volumes, paths)."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import click
import kubernetes_validate
import pytest
import typer.main
import yaml
from deploy_support import (
    GRPC_PORT,
    HEALTH_SERVICE,
    K8S,
    KUBERNETES_VERSIONS,
    METRICS_PORT,
    find_object,
    k8s_objects,
    load_yaml_documents,
    manifest_files,
    pod_spec,
    strata_command_lines,
)

from service.query.cache import DEFAULT_TTL_S

WORKLOADS = ("Deployment", "CronJob")


def validation_errors(doc: dict[str, Any], version: str) -> list[str]:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"]
    return []


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_validate_strictly(version: str) -> None:
    objects = k8s_objects()
    assert len(objects) >= 10
    problems = [
        f"{path.name} {doc['kind']}/{doc['metadata']['name']}: {error}"
        for path, doc in objects
        for error in validation_errors(doc, version)
    ]
    assert not problems, "\n".join(problems)


def test_strict_validation_rejects_unknown_fields() -> None:
    """The check above is live: a misspelt field fails it."""
    deployment = copy.deepcopy(find_object("Deployment", "strata-search"))
    assert not validation_errors(deployment, KUBERNETES_VERSIONS[0])
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinessProbes"] = container.pop("readinessProbe")
    assert validation_errors(deployment, KUBERNETES_VERSIONS[0])


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    applied = {p.name for p in manifest_files() if not p.name.endswith(".example.yaml")}
    assert set(kustomization["resources"]) == applied
    assert kustomization["namespace"] == "strata"
    (generator,) = kustomization["secretGenerator"]
    assert generator["name"] == "strata-admin-token"
    assert generator["files"] == ["admin-token=secrets/admin-token"]
    # the real token lives beside it, ignored by git
    assert "*" in (K8S / "secrets" / ".gitignore").read_text().split()


def test_every_object_is_namespaced_and_labelled() -> None:
    for path, doc in k8s_objects():
        meta = doc["metadata"]
        assert meta["labels"]["app.kubernetes.io/part-of"] == "strata", path.name
        if doc["kind"] != "Namespace":
            assert meta["namespace"] == "strata", f"{path.name} {doc['kind']}"


def test_search_probes_use_the_grpc_health_service() -> None:
    deployment = find_object("Deployment", "strata-search")
    assert deployment["spec"]["replicas"] == 2
    (container,) = pod_spec(deployment)["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": GRPC_PORT, "metrics": METRICS_PORT}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == GRPC_PORT, probe
    assert container["readinessProbe"]["grpc"]["service"] == HEALTH_SERVICE
    assert container["startupProbe"]["grpc"]["service"] == HEALTH_SERVICE
    args = container["args"]
    assert args[args.index("--port") + 1] == str(GRPC_PORT)
    assert args[args.index("--metrics-port") + 1] == str(METRICS_PORT)
    assert args[args.index("--host") + 1] == "0.0.0.0"  # the default 127.0.0.1 is unreachable
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(METRICS_PORT)
    assert annotations["prometheus.io/path"] == "/metrics"


def test_search_drains_within_the_grace_period() -> None:
    deployment = find_object("Deployment", "strata-search")
    spec = pod_spec(deployment)
    (container,) = spec["containers"]
    sleep = container["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep"
    args = container["args"]
    grace = float(args[args.index("--grace") + 1])
    assert spec["terminationGracePeriodSeconds"] > int(sleep[1]) + grace
    # a terminating replica reports NOT_SERVING for at most --grace: liveness must outlast it
    liveness = container["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] > grace
    strategy = deployment["spec"]["strategy"]["rollingUpdate"]
    assert strategy["maxUnavailable"] == 0


def _serve_options() -> dict[str, click.Parameter]:
    from service.cli import app

    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    return {name: p for p in serve.params for name in (*p.opts, *p.secondary_opts)}


def test_manifests_run_real_strata_options() -> None:
    """Every strata command line (Deployment args behind the image's entrypoint, the CronJob's
    script, the Dockerfile's CMD) parses with the real CLI: options exist, values convert,
    required options are there."""
    from service.cli import app

    root = typer.main.get_command(app)
    lines = strata_command_lines()
    assert {argv[0] for _, argv in lines} == {"serve", "index"}
    problems = []
    for where, argv in lines:
        command, rest = root, list(argv)
        while isinstance(command, click.Group) and rest and rest[0] in command.commands:
            command = command.commands[rest.pop(0)]
        assert not isinstance(command, click.Group), f"{where}: {argv} names no command"
        try:
            command.make_context(f"strata {command.name}", rest)
        except click.UsageError as exc:
            problems.append(f"{where}: strata {' '.join(argv)}: {exc.format_message()}")
    assert not problems, "\n".join(problems)


def test_serve_options_the_deployment_relies_on() -> None:
    options = _serve_options()
    for flag in ("--metrics-port", "--admin-token-file", "--tls-cert", "--tls-key", "--grace"):
        assert flag in options, f"strata serve has no {flag}"
    # read from the ConfigMap's environment rather than passed
    from training.core.settings import StrataSettings

    assert "redis_url" in StrataSettings.model_fields  # STRATA_REDIS_URL, read by the settings
    assert not options["--redis-url"].envvar
    assert options["--redis-prefix"].envvar == "STRATA_REDIS_PREFIX"


def test_configmap_names_real_settings() -> None:
    from indexer.versions.publish import PREFIX_ENVIRONMENT
    from training.core.settings import StrataSettings

    settings = {f"STRATA_{name.upper()}" for name in StrataSettings.model_fields}
    known = settings | {PREFIX_ENVIRONMENT}
    data = find_object("ConfigMap", "strata-config")["data"]
    assert set(data) <= known, f"not a setting: {sorted(set(data) - known)}"
    assert data["STRATA_REDIS_URL"].startswith("redis://strata-redis:6379/")
    redis_service = find_object("Service", "strata-redis")
    assert redis_service["spec"]["ports"][0]["port"] == 6379
    for name in WORKLOADS:
        obj = find_object(name, {"Deployment": "strata-search", "CronJob": "strata-reindex"}[name])
        (container,) = pod_spec(obj)["containers"]
        assert {"configMapRef": {"name": "strata-config"}} in container["envFrom"]


def _mounts(obj: dict[str, Any]) -> dict[str, tuple[str, bool, str]]:
    """claim name → (mount path, read-only, volume name) of the pod's PVC mounts."""
    spec = pod_spec(obj)
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in spec["volumes"]
        if "persistentVolumeClaim" in v
    }
    (container,) = spec["containers"]
    return {
        claims[m["name"]]: (m["mountPath"], m.get("readOnly", False), m["name"])
        for m in container["volumeMounts"]
        if m["name"] in claims
    }


def test_bundle_volume_is_shared_at_one_path() -> None:
    search = find_object("Deployment", "strata-search")
    reindex = find_object("CronJob", "strata-reindex")
    served, built = _mounts(search)["strata-bundles"], _mounts(reindex)["strata-bundles"]
    # the announcements in Redis carry absolute paths: one mount path everywhere
    assert served[0] == built[0] == "/bundles"
    assert served[1] is True and built[1] is False  # replicas read, the job writes
    assert _mounts(reindex)["strata-inputs"][1] is True
    args = pod_spec(search)["containers"][0]["args"]
    assert args[args.index("--bundles") + 1] == served[0]
    pvc = find_object("PersistentVolumeClaim", "strata-bundles")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def test_reindex_builds_then_publishes_one_at_a_time() -> None:
    cronjob = find_object("CronJob", "strata-reindex")
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    lines = [argv for where, argv in strata_command_lines() if "strata-reindex" in where]
    assert [argv[:2] for argv in lines] == [["index", "build"], ["index", "publish"]]
    build, publish = lines
    assert build[build.index("--out") + 1] == "/bundles" == publish[publish.index("--bundles") + 1]
    script = pod_spec(cronjob)["containers"][0]["args"][0]
    assert "&& strata index publish" in script  # publish only after a build that succeeded
    assert pod_spec(cronjob)["restartPolicy"] == "Never"


def test_pods_run_locked_down() -> None:
    for path, obj in k8s_objects():
        if obj["kind"] not in WORKLOADS:
            continue
        where = f"{path.name} {obj['kind']}/{obj['metadata']['name']}"
        spec = pod_spec(obj)
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", where
        assert spec["automountServiceAccountToken"] is False, where
        assert spec["enableServiceLinks"] is False, where
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"]["drop"] == ["ALL"], where
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), where
            assert "memory" in resources["limits"], where


def test_redis_is_a_bounded_cache() -> None:
    redis = find_object("Deployment", "strata-redis")
    (container,) = pod_spec(redis)["containers"]
    assert container["image"] == "redis:7"
    args = container["args"]
    # only keys with a TTL (the query cache's) are evicted, never the published-version keys
    assert args[args.index("--maxmemory-policy") + 1] == "volatile-lru"
    assert DEFAULT_TTL_S > 0
    assert args[args.index("--save") + 1] == ""
    assert args[args.index("--appendonly") + 1] == "no"
    assert args[args.index("--maxmemory") + 1].endswith("mb")


def test_selectors_match_their_pods() -> None:
    search_labels = pod_labels("Deployment", "strata-search")
    for kind, name in (
        ("Service", "strata-search"),
        ("Service", "strata-search-headless"),
    ):
        selector = find_object(kind, name)["spec"]["selector"]
        assert selector.items() <= search_labels.items(), name
        ports = {p["name"]: p["port"] for p in find_object(kind, name)["spec"]["ports"]}
        assert ports["grpc"] == GRPC_PORT
    assert find_object("Service", "strata-search")["spec"]["ports"][1]["port"] == METRICS_PORT
    pdb = find_object("PodDisruptionBudget", "strata-search")["spec"]
    assert pdb["selector"]["matchLabels"].items() <= search_labels.items()
    assert pdb["minAvailable"] < find_object("Deployment", "strata-search")["spec"]["replicas"]
    redis_selector = find_object("Service", "strata-redis")["spec"]["selector"]
    assert redis_selector.items() <= pod_labels("Deployment", "strata-redis").items()
    policy = find_object("NetworkPolicy", "strata-redis")["spec"]
    assert (
        policy["podSelector"]["matchLabels"].items()
        <= pod_labels("Deployment", "strata-redis").items()
    )
    allowed = policy["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    assert allowed.items() <= search_labels.items()
    assert allowed.items() <= pod_labels("CronJob", "strata-reindex").items()


def pod_labels(kind: str, name: str) -> dict[str, str]:
    obj = find_object(kind, name)
    template = (
        obj["spec"]["jobTemplate"]["spec"]["template"]
        if kind == "CronJob"
        else obj["spec"]["template"]
    )
    return template["metadata"]["labels"]


@pytest.mark.slow
def test_kustomize_renders_valid_objects(tmp_path: Path) -> None:
    """`kubectl kustomize` (kustomize built into kubectl) renders the set, with a token file
    made here, into objects that validate too, the Secret's hashed name rewritten."""
    kubectl = shutil.which("kubectl")
    kustomize = shutil.which("kustomize")
    if kubectl is None and kustomize is None:
        pytest.skip("neither kubectl nor kustomize is installed (optional check)")
    tree = tmp_path / "k8s"
    shutil.copytree(K8S, tree)
    (tree / "secrets" / "admin-token").write_text("test-token")
    command = [kubectl, "kustomize", str(tree)] if kubectl else [kustomize, "build", str(tree)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(result.stdout)
    objects = load_yaml_documents(rendered)
    assert len(objects) == len(k8s_objects())  # the example Secret replaced by the generated one
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    assert secret["metadata"]["name"].startswith("strata-admin-token-")
    for obj in objects:
        assert obj["kind"] == "Namespace" or obj["metadata"]["namespace"] == "strata"
        assert not validation_errors(obj, KUBERNETES_VERSIONS[-1]), obj["metadata"]["name"]
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] == "strata-search":
            volumes = {v["name"]: v for v in obj["spec"]["template"]["spec"]["volumes"]}
            assert volumes["admin-token"]["secret"]["secretName"] == secret["metadata"]["name"]
