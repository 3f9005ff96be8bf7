"""AdminService (Reload, Drain, Status behind a bearer token), health and graceful shutdown,
through real servers on free ports."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from serving_helpers import HeldEncoder
from waiting import WAIT_S, wait_for

from indexer.format.bundle import Bundle
from indexer.update.rows import DeleteConfig, delete_rows
from service._generated.strata.v1 import admin_pb2 as apb
from service._generated.strata.v1 import admin_pb2_grpc
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient, StrataClientError
from service.api.server import ServerConfig
from service.cli.serve_setup import read_admin_token
from service.engine.search import SearchEngine
from training.core.settings import StrataSettings

TOKEN = "s3cret-admin-token"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
DELETED = ("scene-0000000", "scene-0000001", "scene-0000002")
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture(scope="module")
def two_versions(text_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the text bundle with v000002 (three rows deleted) as CURRENT."""
    root = tmp_path_factory.mktemp("admin") / "bundles"
    shutil.copytree(text_bundle, root)
    ids = Bundle.open(root).ids([0, 1, 2])
    assert tuple(ids) == DELETED, ids
    delete_rows(DeleteConfig(bundles=root, ids=DELETED))
    assert Bundle.open(root).name == "v000002"
    return root


@pytest.fixture
def admin_server(two_versions: Path, minilm) -> Iterator[BackgroundServer]:
    """A server on v000001 of `two_versions` (not the CURRENT one), with the AdminService."""
    engine = SearchEngine(Bundle.open_version(two_versions / "v000001"), minilm)
    with BackgroundServer(engine, ServerConfig(port=0, admin_token=TOKEN)) as running:
        yield running


def health_of(target: str) -> dict[str, int]:
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return {
            name: stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status
            for name in ("", "strata.v1.SearchService")
        }


def test_admin_calls_need_the_bearer_token(admin_server: BackgroundServer):
    with grpc.insecure_channel(admin_server.target) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        for metadata in ((), (("authorization", "Bearer wrong"),), (("authorization", TOKEN),)):
            for call, request in (
                (admin.Status, apb.StatusRequest()),
                (admin.Drain, apb.DrainRequest()),
                (admin.Reload, apb.ReloadRequest()),
            ):
                with pytest.raises(grpc.RpcError) as caught:
                    call(request, metadata=metadata, timeout=10)
                assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert "token" in caught.value.details()
        status = admin.Status(apb.StatusRequest(), metadata=AUTH, timeout=10)
    # nothing was reloaded or drained by the refused calls
    assert (status.bundle_version, status.rows, status.serving, status.draining) == (
        1,
        300,
        True,
        False,
    )
    assert status.hot_swaps == 0 and status.encoder == "minilm"
    assert Path(status.bundles_dir) == Path(status.bundle_path).parent
    assert health_of(admin_server.target) == {"": SERVING, "strata.v1.SearchService": SERVING}


def test_without_a_token_there_is_no_admin_service(server: BackgroundServer):
    with grpc.insecure_channel(server.target) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            admin.Status(apb.StatusRequest(), metadata=AUTH, timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_reload_to_current_and_back_while_queries_run(admin_server: BackgroundServer):
    stop = threading.Event()
    answered: list[int] = []
    failures: list[BaseException] = []

    def query_loop() -> None:
        with StrataClient(admin_server.target, timeout=30) as client:
            while not stop.is_set():
                try:
                    answered.append(client.search("a dog", k=5).bundle_version)
                except BaseException as exc:
                    failures.append(exc)
                    return

    with (
        grpc.insecure_channel(admin_server.target) as channel,
        StrataClient(admin_server.target) as client,
        ThreadPoolExecutor(2) as pool,
    ):
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        loops = [pool.submit(query_loop) for _ in range(2)]
        wait_for(lambda: len(answered) >= 2 or bool(failures), WAIT_S, "the first answers")
        to_current = admin.Reload(apb.ReloadRequest(), metadata=AUTH, timeout=60)
        assert (to_current.previous_version, to_current.bundle_version) == (1, 2)
        assert (to_current.bundle_name, to_current.rows) == ("v000002", 297)
        assert to_current.load_seconds > 0
        info = client.index_info()
        assert (info.bundle_version, info.rows) == (2, 297)
        hits = client.search("a dog", k=300).ids
        assert len(hits) == 297 and not set(DELETED) & set(hits)
        seen = len(answered)  # queries keep flowing on the new version
        wait_for(lambda: 2 in answered[seen:] or bool(failures), WAIT_S, "an answer from v2")
        back = admin.Reload(apb.ReloadRequest(version="v000001"), metadata=AUTH, timeout=60)
        assert (back.previous_version, back.bundle_version, back.rows) == (2, 1, 300)
        assert set(DELETED) <= set(client.search("a dog", k=300).ids)
        stop.set()
        for loop in loops:
            loop.result(30)
        status = admin.Status(apb.StatusRequest(), metadata=AUTH, timeout=10)
    assert not failures, failures
    assert set(answered) <= {1, 2} and 2 in answered
    assert (status.bundle_version, status.hot_swaps) == (1, 2)
    registry = admin_server.server.metrics.registry
    assert registry.get_sample_value("strata_hot_swaps_total", {"result": "ok"}) == 2
    assert registry.get_sample_value("strata_bundle_version") == 1


@pytest.mark.parametrize(
    ("version", "code", "message"),
    [
        ("v000009", grpc.StatusCode.FAILED_PRECONDITION, "no bundle version v000009 in"),
        ("../v000001", grpc.StatusCode.INVALID_ARGUMENT, "not a bundle version name"),
        ("latest", grpc.StatusCode.INVALID_ARGUMENT, "'latest' is not a bundle version name"),
    ],
)
def test_a_failed_reload_keeps_serving(admin_server, version: str, code, message: str):
    with grpc.insecure_channel(admin_server.target) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            admin.Reload(apb.ReloadRequest(version=version), metadata=AUTH, timeout=30)
        status = admin.Status(apb.StatusRequest(), metadata=AUTH, timeout=10)
    assert caught.value.code() == code and message in caught.value.details()
    assert (status.bundle_version, status.hot_swaps, status.serving) == (1, 0, True)
    registry = admin_server.server.metrics.registry
    assert registry.get_sample_value("strata_hot_swaps_total", {"result": "failed"}) == 1
    with StrataClient(admin_server.target) as client:
        assert client.search("a dog", k=1).bundle_version == 1


def test_a_reload_refuses_a_bundle_of_another_encoder(two_versions: Path, minilm, tmp_path):
    root = tmp_path / "bundles"
    shutil.copytree(two_versions, root)
    manifest = root / "v000002" / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"encoder": "minilm"', '"encoder": "other"'))
    engine = SearchEngine(Bundle.open_version(root / "v000001"), minilm)
    with (
        BackgroundServer(engine, ServerConfig(port=0, admin_token=TOKEN)) as running,
        grpc.insecure_channel(running.target) as channel,
    ):
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            admin.Reload(apb.ReloadRequest(), metadata=AUTH, timeout=30)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "embedded with 'other'" in caught.value.details()


def test_drain_reports_not_serving_but_still_answers(admin_server: BackgroundServer):
    with grpc.insecure_channel(admin_server.target) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        assert admin.Drain(apb.DrainRequest(), metadata=AUTH, timeout=10).serving is False
        assert admin.Drain(apb.DrainRequest(), metadata=AUTH, timeout=10).serving is False
        status = admin.Status(apb.StatusRequest(), metadata=AUTH, timeout=10)
    assert health_of(admin_server.target) == {
        "": NOT_SERVING,
        "strata.v1.SearchService": NOT_SERVING,
    }
    assert (status.serving, status.draining) == (False, True)
    assert admin_server.server.metrics.registry.get_sample_value("strata_serving") == 0
    with StrataClient(admin_server.target) as client:
        assert len(client.search("a dog", k=2).hits) == 2


def test_graceful_shutdown_finishes_the_call_in_flight(text_bundle: Path, minilm):
    encoder = HeldEncoder(minilm, held=True)
    engine = SearchEngine(Bundle.open(text_bundle), encoder)
    running = BackgroundServer(engine, ServerConfig(port=0)).start()
    target = running.target
    with StrataClient(target, timeout=WAIT_S) as client, ThreadPoolExecutor(2) as pool:
        in_flight = pool.submit(client.search, "a dog", k=3)
        assert encoder.arrived(1)
        stopping = pool.submit(running.stop, 2 * WAIT_S, 3 * WAIT_S)  # a grace it never needs
        wait_for(lambda: not running.server.serving, WAIT_S, "NOT_SERVING")  # as stopping starts
        late = StrataClient(target, timeout=WAIT_S)
        with late, pytest.raises(StrataClientError) as caught:
            late.search("a cat")  # new calls are refused while the running one finishes
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE
        assert not in_flight.done()
        encoder.release()
        result = in_flight.result(WAIT_S)
        stopping.result(3 * WAIT_S)
    assert len(result.hits) == 3 and encoder.calls == 1
    assert running.server.metrics.registry.get_sample_value("strata_serving") == 0


def test_admin_token_comes_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    token_file = tmp_path / "token"
    token_file.write_text("  from-the-file \n")
    monkeypatch.setenv("STRATA_ADMIN_TOKEN", "env")
    assert read_admin_token(token_file, StrataSettings()) == "from-the-file"
    monkeypatch.setenv("STRATA_ADMIN_TOKEN", " from-env ")
    assert read_admin_token(None, StrataSettings()) == "from-env"
    assert read_admin_token(None) == "from-env"  # the settings of the moment
    monkeypatch.delenv("STRATA_ADMIN_TOKEN")
    assert read_admin_token(None, StrataSettings()) is None
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(Exception, match=r"admin token file .*empty is empty"):
        read_admin_token(tmp_path / "empty")
    with pytest.raises(Exception, match="admin token file not found"):
        read_admin_token(tmp_path / "missing")
    with pytest.raises(Exception, match="admin token is empty"):
        ServerConfig(admin_token="  ")
    assert TOKEN not in repr(ServerConfig(admin_token=TOKEN))
