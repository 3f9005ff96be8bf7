"""TLS: a real server with a self-signed certificate made in the test, and clients that do and
do not trust it."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import ValidationError
from waiting import WAIT_S

from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient, StrataClientError
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.errors import ServiceError


def self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    """A certificate for localhost and 127.0.0.1, and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_tls_server_answers_clients_that_trust_its_certificate(engine: SearchEngine, tmp_path):
    cert, key = self_signed(tmp_path, "server")
    other_cert, _ = self_signed(tmp_path, "other")
    with BackgroundServer(engine, ServerConfig(port=0, tls_cert=cert, tls_key=key)) as running:
        with StrataClient(running.target, root_certificates=cert) as client:
            result = client.search("a dog", granularity="object", k=3)
            assert len(result.hits) == 3
        with StrataClient(running.target, root_certificates=cert.read_bytes()) as client:
            assert client.index_info().rows == 300
        for untrusting in (
            StrataClient(running.target, timeout=WAIT_S),  # plaintext to a TLS port
            StrataClient(running.target, timeout=WAIT_S, root_certificates=other_cert),
        ):
            with untrusting, pytest.raises(StrataClientError) as caught:
                untrusting.search("a dog")
            assert caught.value.code == grpc.StatusCode.UNAVAILABLE


def test_tls_configuration_errors_are_named(engine: SearchEngine, tmp_path: Path):
    cert, _ = self_signed(tmp_path, "server")
    with pytest.raises(ValidationError, match="TLS needs both a certificate and its key"):
        ServerConfig(tls_cert=cert)
    config = ServerConfig(port=0, tls_cert=cert, tls_key=tmp_path / "missing.key")
    running = BackgroundServer(engine, config)
    with pytest.raises(ServiceError, match=r"TLS key file not found: .*missing.key"):
        running.start()
    running.stop(grace=0)
    with pytest.raises(ServiceError, match="root certificates file not found"):
        StrataClient("127.0.0.1:1", root_certificates=tmp_path / "nowhere.pem")
