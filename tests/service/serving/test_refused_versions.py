"""A version that does not verify is refused on every serving path — a hot swap from a Redis
announcement, AdminService.Reload, and `strata serve` start-up — and the replica keeps serving
what it served, counting the refusal by reason."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from serving_helpers import REDIS_URL as URL
from waiting import WAIT_S, wait_for

from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.format.bundle import Bundle
from indexer.update.rows import DeleteConfig, delete_rows
from indexer.versions.bundle_store import BundleStore
from indexer.versions.publish import RedisPublisher, publish_version
from service._generated.strata.v1 import admin_pb2 as apb
from service._generated.strata.v1 import admin_pb2_grpc
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.serving.hot_swap import HotSwapper
from tests.tamper import damages

TOKEN = "refusal-token"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
# damage → the reason counted, and the file the refusal names
CASES = {
    "flipped byte: prefix index": ("checksum", "prefix_24.faiss: checksum mismatch"),
    "truncated: ids": ("size", "ids.parquet: "),
    "manifest re-listed: prefix rows swapped": ("vectors", "prefix_24.faiss: row 0 disagrees"),
}


@pytest.fixture
def bundles(text_bundle: Path, tmp_path: Path) -> Path:
    """The text bundle's rows in the layout of a file per prefix (the files the cases damage):
    v000001, and one new version per case (CURRENT the last), each damaged as its case says."""
    inputs, root = text_bundle.parent, tmp_path / "bundles"
    build_bundle(
        BuildConfig(
            cache=inputs / "cache",
            grasp=inputs / "grasp",
            cedar=inputs / "cedar",
            out=root,
            progress=False,
            store="none",
            verify_sample=0,
        )
    )
    paths = []
    for row in range(len(CASES)):
        row_id = Bundle.open(root).ids([row])[0]
        paths.append(
            delete_rows(DeleteConfig(bundles=root, ids=(row_id,), verify_sample=0, keep=10)).path
        )
    for path, damage in zip(paths, CASES, strict=True):
        damages(path)[damage](path)
    return root


def refused(server: BackgroundServer, reason: str) -> float:
    value = server.server.metrics.registry.get_sample_value(
        "strata_bundle_refused_total", {"reason": reason}
    )
    return value or 0.0


def test_hot_swap_refuses_each_damaged_version_and_serves_on(bundles: Path, minilm, prefix: str):
    engine = SearchEngine(Bundle.open_version(bundles / "v000001"), minilm)
    store, publisher = BundleStore(bundles), RedisPublisher(URL, prefix)
    with BackgroundServer(engine, ServerConfig(port=0)) as server:
        swapper = HotSwapper(server.server, URL, prefix, backoff_s=0.1, poll_s=60)
        swapper.start(server.loop)
        try:
            wait_for(lambda: swapper.connected, WAIT_S, "the subscription")
            for number, (reason, named) in enumerate(CASES.values(), start=2):
                publish_version(store, f"v{number:06d}", publisher)  # announced as it is
                wait_for(lambda n=number: swapper.counts.failures == n - 1, WAIT_S, "the refusal")
                assert refused(server, reason) >= 1
                event = swapper.counts.events[-1]
                assert event.result == "failed" and named in (event.error or "")
                assert server.server.served.engine.bundle.name == "v000001"
            with StrataClient(server.target) as client:
                assert client.search("a dog", k=3).bundle_version == 1
        finally:
            swapper.close()
    registry = server.server.metrics.registry
    assert registry.get_sample_value("strata_hot_swaps_total", {"result": "failed"}) == 3
    assert registry.get_sample_value("strata_hot_swaps_total", {"result": "ok"}) == 0


def test_reload_refuses_a_damaged_version_naming_the_file(bundles: Path, minilm):
    engine = SearchEngine(Bundle.open_version(bundles / "v000001"), minilm)
    config = ServerConfig(port=0, admin_token=TOKEN)
    with BackgroundServer(engine, config) as server:
        with grpc.insecure_channel(server.target) as channel:
            admin = admin_pb2_grpc.AdminServiceStub(channel)
            for number, (reason, named) in enumerate(CASES.values(), start=2):
                with pytest.raises(grpc.RpcError) as caught:
                    request = apb.ReloadRequest(version=f"v{number:06d}")
                    admin.Reload(request, metadata=AUTH, timeout=30)
                assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                details = caught.value.details()
                assert details.startswith(f"v{number:06d} does not verify, refused: ")
                assert named in details
                assert refused(server, reason) == 1
            with pytest.raises(grpc.RpcError) as caught:
                admin.Reload(apb.ReloadRequest(), metadata=AUTH, timeout=30)  # CURRENT's
            assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            status = admin.Status(apb.StatusRequest(), metadata=AUTH, timeout=10)
        assert status.bundle_name == "v000001" and status.hot_swaps == 0


def test_serve_refuses_to_start_on_a_damaged_current_version(bundles: Path, strata):
    run = strata("serve", "--bundles", str(bundles), "--port", "0", "--device", "cpu")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("strata: error: v000004 does not verify, refused: prefix_24.faiss")


def test_reload_quotes_a_short_prefix_of_a_huge_version_name(text_bundle: Path, minilm):
    engine = SearchEngine(Bundle.open(text_bundle), minilm)
    with (
        BackgroundServer(engine, ServerConfig(port=0, admin_token=TOKEN)) as server,
        grpc.insecure_channel(server.target) as channel,
        pytest.raises(grpc.RpcError) as caught,
    ):
        request = apb.ReloadRequest(version="v" * 3_000_000)
        admin_pb2_grpc.AdminServiceStub(channel).Reload(request, metadata=AUTH, timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = caught.value.details()
    assert len(details) < 200 and "(3000000 characters)" in details, details[:300]
