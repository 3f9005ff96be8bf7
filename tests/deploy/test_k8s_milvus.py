"""deploy/k8s-milvus: deploy/k8s with the gallery in a Milvus cluster. Its patches applied to the
base objects (a strategic merge: containers by name, other lists replaced) give objects that
validate strictly, strata command lines the real CLI parses, and a backend address that is
the Milvus resource's proxy Service; Milvus allows a vector field per prefix."""

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
    DEPLOY,
    K8S,
    KUBERNETES_VERSIONS,
    find_object,
    load_yaml_documents,
    pod_spec,
    shell_commands,
)

from indexer.milvus.store import client_uri
from training.core.granularity import default_contract

OVERLAY = DEPLOY / "k8s-milvus"


def merged(base: Any, patch: Any) -> Any:
    """A strategic merge of `patch` into `base` (maps merged, lists of named maps merged by
    name, other lists replaced)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = merged(base[key], value) if key in base else value
        return out
    if (
        isinstance(base, list)
        and isinstance(patch, list)
        and all(isinstance(x, dict) and "name" in x for x in base + patch)
    ):
        by_name = {x["name"]: x for x in base}
        out = [merged(by_name[x["name"]], x) if x["name"] in by_name else x for x in patch]
        return out + [x for x in base if x["name"] not in {p["name"] for p in patch}]
    return copy.deepcopy(patch)


def kustomization() -> dict[str, Any]:
    return yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())


def patched(kind: str, name: str) -> dict[str, Any]:
    for entry in kustomization()["patches"]:
        (patch,) = load_yaml_documents(OVERLAY / entry["path"])
        if patch["kind"] == kind and patch["metadata"]["name"] == name:
            return merged(find_object(kind, name), patch)
    raise AssertionError(f"no patch of {kind}/{name}")


def milvus() -> dict[str, Any]:
    (resource,) = load_yaml_documents(OVERLAY / "milvus.yaml")
    return resource


def strata_lines() -> list[tuple[str, list[str]]]:
    search = pod_spec(patched("Deployment", "strata-search"))["containers"][0]
    reindex = pod_spec(patched("CronJob", "strata-reindex"))["containers"][0]
    lines = [("search", ["serve", *map(str, search["args"])])]
    script = reindex["args"][0]
    lines += [("reindex", argv[1:]) for argv in shell_commands(script) if argv[0] == "strata"]
    return lines


def test_overlay_is_the_base_plus_milvus() -> None:
    found = kustomization()
    assert found["resources"] == ["../k8s", "milvus.yaml"]
    assert found["namespace"] == "strata"
    assert {p["path"] for p in found["patches"]} == {p.name for p in OVERLAY.glob("*.patch.yaml")}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_patched_objects_validate_strictly(version: str) -> None:
    for kind, name in (("Deployment", "strata-search"), ("CronJob", "strata-reindex")):
        obj = patched(kind, name)
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{kind}/{name}: {exc.message}") from None


def test_patches_keep_the_base_containers_whole() -> None:
    (container,) = pod_spec(patched("Deployment", "strata-search"))["containers"]
    base = pod_spec(find_object("Deployment", "strata-search"))["containers"][0]
    assert container["image"] == base["image"] and container["readinessProbe"]
    base_args = [str(a) for a in base["args"]]
    args = [str(a) for a in container["args"]]
    assert args[: len(base_args)] == base_args  # every base option kept, the backend's added


def test_command_lines_parse_with_the_real_cli() -> None:
    from service.cli import app

    root = typer.main.get_command(app)
    lines = strata_lines()
    assert [argv[:2] for _, argv in lines][1:] == [
        ["index", "build"],
        ["index", "publish"],
        ["index", "export"],
    ]
    for where, argv in lines:
        command, rest = root, list(argv)
        while isinstance(command, click.Group) and rest and rest[0] in command.commands:
            command = command.commands[rest.pop(0)]
        try:
            command.make_context(f"strata {command.name}", rest)
        except click.UsageError as exc:
            raise AssertionError(f"{where}: {exc.format_message()}") from None


def test_backend_is_the_milvus_proxy_and_allows_every_prefix() -> None:
    resource = milvus()
    assert (resource["apiVersion"], resource["kind"]) == ("milvus.io/v1beta1", "Milvus")
    assert resource["metadata"]["namespace"] == "strata"
    assert resource["metadata"]["labels"]["app.kubernetes.io/part-of"] == "strata"
    proxy = f"http://{resource['metadata']['name']}-milvus:19530"  # the operator's Service
    lines = dict(strata_lines())
    serve = lines["search"]
    assert client_uri(serve[serve.index("--backend") + 1]) == proxy
    export = next(argv for _, argv in strata_lines() if argv[:2] == ["index", "export"])
    assert client_uri(export[export.index("--to") + 1]) == proxy
    assert serve[serve.index("--collection") + 1] == export[export.index("--name") + 1]
    assert resource["spec"]["config"]["proxy"]["maxVectorFieldNum"] >= len(default_contract(512))
    assert resource["spec"]["components"]["queryNode"]["replicas"] >= 2


@pytest.mark.slow
def test_kustomize_renders_the_overlay(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    kustomize = shutil.which("kustomize")
    if kubectl is None and kustomize is None:
        pytest.skip("neither kubectl nor kustomize is installed (optional check)")
    shutil.copytree(K8S, tmp_path / "k8s")
    shutil.copytree(OVERLAY, tmp_path / "k8s-milvus")
    (tmp_path / "k8s" / "secrets" / "admin-token").write_text("test-token")
    tree = str(tmp_path / "k8s-milvus")
    command = [kubectl, "kustomize", tree] if kubectl else [kustomize, "build", tree]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "--backend" in result.stdout and "kind: Milvus" in result.stdout
