"""The container's health check: one grpc.health.v1 Check against the local server.

    python healthcheck.py [TARGET] [SERVICE]

TARGET defaults to STRATA_HEALTH_TARGET or 127.0.0.1:50051, SERVICE to
strata.v1.SearchService ("" asks for the whole server). Exit 0 when the answer is SERVING,
1 otherwise (NOT_SERVING while the server drains, an unknown service, no answer within
STRATA_HEALTH_TIMEOUT seconds, default 3). For a server started with --tls-cert/--tls-key,
set STRATA_HEALTH_TLS_CA to the CA file that signed it, and STRATA_HEALTH_TLS_NAME to a name
in its certificate when that is not the TARGET's host.

The image's HEALTHCHECK runs it (grpc_health_probe is not in the image); Kubernetes uses its
native `grpc:` probe instead and ignores HEALTHCHECK. It needs only grpcio and
grpcio-health-checking, both dependencies of the project.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

DEFAULT_TARGET = "127.0.0.1:50051"
DEFAULT_SERVICE = "strata.v1.SearchService"


def open_channel(target: str, ca_file: str | None, server_name: str | None) -> grpc.Channel:
    if not ca_file:
        return grpc.insecure_channel(target)
    credentials = grpc.ssl_channel_credentials(root_certificates=Path(ca_file).read_bytes())
    options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    return grpc.secure_channel(target, credentials, options=options)


def check(
    target: str,
    service: str = DEFAULT_SERVICE,
    timeout: float = 3.0,
    ca_file: str | None = None,
    server_name: str | None = None,
) -> tuple[bool, str]:
    """(healthy, the status the server reported or why there was no answer)."""
    with open_channel(target, ca_file, server_name) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            return False, f"{exc.code().name}: {exc.details()}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    return response.status == health_pb2.HealthCheckResponse.SERVING, status


def main(argv: list[str]) -> int:
    target = argv[0] if argv else os.environ.get("STRATA_HEALTH_TARGET", DEFAULT_TARGET)
    service = argv[1] if len(argv) > 1 else DEFAULT_SERVICE
    healthy, said = check(
        target,
        service,
        timeout=float(os.environ.get("STRATA_HEALTH_TIMEOUT", "3")),
        ca_file=os.environ.get("STRATA_HEALTH_TLS_CA"),
        server_name=os.environ.get("STRATA_HEALTH_TLS_NAME"),
    )
    print(f"{target} {service or '(server)'}: {said}")
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
