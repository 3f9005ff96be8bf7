"""The HTTP/JSON API of a real server: the gRPC API in the proto's JSON mapping, on the same
engine, with the same errors, the same metrics, and thumbnails from the image root only; a
client that disconnects cancels its call."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from google.protobuf import json_format
from http_helpers import call
from search_gallery import LANTERN, build_image_bundle
from serving_helpers import HeldEncoder
from test_server_metrics import samples, value
from waiting import WAIT_S, wait_for

from indexer.format.bundle import Bundle
from service._generated.strata.v1 import search_pb2 as pb
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient, StrataClientError
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.engine.thumbnails import BundleImages, common_root, inside, recorded_image_root
from service.serving.batching_config import BatchingConfig

SEARCH = "strata.v1.SearchService"


@pytest.fixture(scope="module")
def http(engine: SearchEngine) -> Iterator[BackgroundServer]:
    config = ServerConfig(port=0, http_port=0, metrics_port=0)
    with BackgroundServer(engine, config) as running:
        yield running


def base(server: BackgroundServer) -> str:
    return f"http://{server.server.http_address}"


def test_search_over_http_answers_as_grpc_does(http: BackgroundServer):
    request = {
        "query": {"text": "a dog"},
        "granularity": "GRANULARITY_OBJECT",
        "topK": 5,
        "metadataFields": ["caption"],
        "explain": True,
    }
    status, answer = call(base(http), "/v1/search", request)
    assert status == 200
    assert answer["granularity"] == "GRANULARITY_OBJECT" and answer["prefixLength"] == 24
    assert answer["routingReason"] == "requested"
    with StrataClient(http.target) as client:
        grpc_result = client.search("a dog", granularity="object", k=5, metadata_fields=["caption"])
    assert [h["id"] for h in answer["hits"]] == grpc_result.ids
    assert [h["score"] for h in answer["hits"]] == pytest.approx(
        [h.score for h in grpc_result.hits], abs=1e-6
    )
    first = answer["hits"][0]
    assert set(first) >= {"id", "score", "row", "metadata", "concepts", "sharedConcepts"}
    assert isinstance(first["row"], str) and first["metadata"]["caption"]  # int64 as a string
    # the answer is the canonical mapping of the proto message: it parses back as one
    message = json_format.ParseDict(answer, pb.SearchResponse())
    assert message.hits[0].id == grpc_result.ids[0]


def test_proto_field_names_and_auto_routing_are_accepted(http: BackgroundServer):
    status, answer = call(base(http), "/v1/search", {"query": {"text": "a red dog"}, "top_k": 3})
    assert status == 200 and len(answer["hits"]) == 3
    assert answer["granularity"] == "GRANULARITY_ATTRIBUTE"
    assert "attribute" in answer["routingReason"]


def test_batch_explain_concepts_and_info(http: BackgroundServer, engine: SearchEngine):
    url = base(http)
    status, batch = call(
        url,
        "/v1/batch-search",
        {
            "requests": [
                {"query": {"text": "a dog"}, "granularity": "GRANULARITY_OBJECT", "topK": 2},
                {"query": {"text": "a cat"}, "granularity": "GRANULARITY_FULL", "topK": 3},
            ]
        },
    )
    assert status == 200 and [len(r["hits"]) for r in batch["responses"]] == [2, 3]
    version = str(engine.bundle.version)  # int64: a JSON string; the batch's and each answer's
    assert [batch["bundleVersion"]] == list({r["bundleVersion"] for r in batch["responses"]})
    assert batch["bundleVersion"] == version
    row = int(batch["responses"][0]["hits"][0]["row"])
    status, why = call(url, "/v1/explain", {"query": {"text": "a dog"}, "row": row})
    assert status == 200 and int(why["row"]) == row
    assert [s["prefixLength"] for s in why["similarities"]] == [24, 48, 96, 192, 384]
    status, page = call(url, "/v1/concepts?pageSize=5")
    assert status == 200 and len(page["concepts"]) == 5 and page["nextPageToken"]
    name = LANTERN
    status, found = call(url, "/v1/concepts:get", {"concept": {"label": "+0"}})
    assert status == 200 and found["concepts"][0]["label"] == "+0"
    status, named = call(url, f"/v1/concepts?nameContains={name.upper()}")
    assert status == 200 and [c["name"] for c in named["concepts"]] == [LANTERN]
    for flag in ("includeBelowFloor=true", "include_below_floor=false"):  # a bool as text
        status, flagged = call(url, f"/v1/concepts?pageSize=5&{flag}")
        assert status == 200 and flagged["totalSize"] == page["totalSize"]  # no floor here
    status, info = call(url, "/v1/index-info")
    assert status == 200 and int(info["rows"]) == engine.bundle.rows and info["dim"] == 384


@pytest.mark.parametrize(
    ("body", "status", "grpc_status", "message"),
    [
        ({"query": {"text": " "}}, 400, "INVALID_ARGUMENT", "empty"),
        ({"query": {"text": "a dog"}, "topK": 5000}, 400, "INVALID_ARGUMENT", "top_k"),
        ({"query": {"text": "a dog"}, "topK": "many"}, 400, "INVALID_ARGUMENT", "topK"),
        ({"query": {"text": "a dog"}, "granularity": "TINY"}, 400, "INVALID_ARGUMENT", "TINY"),
        ({"query": {"text": "a dog"}, "colour": "red"}, 400, "INVALID_ARGUMENT", "colour"),
        ({"query": {"vector": {"values": [1, 2]}}}, 400, "INVALID_ARGUMENT", "dimension"),
        (
            {"query": {"text": "a dog"}, "filter": {"require": [{"name": "no-such-thing-x"}]}},
            400,
            "INVALID_ARGUMENT",
            "no-such-thing-x",
        ),
        ([1, 2, 3], 400, "INVALID_ARGUMENT", "SearchRequest"),
    ],
)
def test_bad_requests_get_the_grpc_status_and_message(
    http: BackgroundServer, body: object, status: int, grpc_status: str, message: str
):
    code, answer = call(base(http), "/v1/search", body)
    assert code == status, answer
    assert answer["error"]["status"] == grpc_status and answer["error"]["code"] == status
    assert message in answer["error"]["message"]


def test_the_message_is_the_one_grpc_sends(http: BackgroundServer):
    _, answer = call(base(http), "/v1/search", {"query": {"text": "a dog"}, "topK": 0})
    with StrataClient(http.target) as client, pytest.raises(StrataClientError) as grpc_error:
        client.search("a dog", k=0)
    assert answer["error"]["message"] in str(grpc_error.value)


def test_not_found_bodies_that_are_no_json_and_huge_bodies(http: BackgroundServer):
    url = base(http)
    code, answer = call(url, "/v1/concepts:get", {"concept": {"name": "no-concept-by-this"}})
    assert code == 404 and answer["error"]["status"] == "NOT_FOUND"
    code, answer = call(url, "/v1/explain", {"query": {"text": "a dog"}, "itemId": "nobody"})
    assert code == 404
    code, answer = call(url, "/v1/search", raw=b'{"query": {"text": "a dog"')
    assert code == 400 and "not a valid strata.v1.SearchRequest" in answer["error"]["message"]
    code, answer = call(url, "/v1/search", raw=b"\xff\xfe\x00")
    assert code == 400 and "UTF-8" in answer["error"]["message"]
    code, answer = call(url, "/v1/search", raw=b"[" * 100_000 + b"]" * 100_000)
    assert code == 400
    over_grpc_limit = json.dumps({"query": {"text": "a" * (5 * 2**20)}}).encode()  # < 8 MiB
    code, answer = call(url, "/v1/search", raw=over_grpc_limit)
    assert code == 413 and answer["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert "request message of" in answer["error"]["message"]
    long_text = json.dumps({"query": {"text": "a" * 5000}}).encode()
    code, answer = call(url, "/v1/search", raw=long_text)
    assert code == 400 and "text query of 5000 characters" in answer["error"]["message"]


def test_a_body_that_lies_about_its_length_is_refused_unread(http: BackgroundServer):
    host, port = http.server.http_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 900000000\r\n\r\n{"
        )
        reply = sock.recv(4096).decode(errors="replace")
    assert reply.startswith("HTTP/1.1 413")


def test_admin_calls_and_unknown_routes_are_not_exposed(http: BackgroundServer):
    for path in ("/v1/reload", "/v1/drain", "/strata.v1.AdminService/Drain", "/v1/status"):
        code, answer = call(base(http), path, {})
        assert code == 404 and answer["error"]["status"] == "NOT_FOUND"
    code, answer = call(base(http), "/v1/search")  # GET where only POST is served
    assert code == 405


def test_health_openapi_and_metrics(http: BackgroundServer):
    url = base(http)
    assert call(url, "/healthz") == (200, {"status": "SERVING"})
    code, document = call(url, "/openapi.json")
    assert code == 200 and document["openapi"].startswith("3.1")
    assert {"/v1/search", "/v1/explain", "/v1/concepts", "/v1/index-info"} <= set(document["paths"])
    request = document["components"]["schemas"]["strata.v1.SearchRequest"]
    assert {"query", "granularity", "topK", "filter", "where", "groupBy"} <= set(
        request["properties"]
    )
    assert request["properties"]["granularity"]["enum"][0] == "GRANULARITY_UNSPECIFIED"
    before = samples(_scrape(http))
    call(url, "/v1/search", {"query": {"text": "a metrics otter"}, "topK": 2})
    call(url, "/v1/search", {"query": {"text": ""}})
    after = samples(_scrape(http))
    labels = {"grpc_type": "http", "grpc_service": SEARCH, "grpc_method": "Search"}
    for code_name in ("OK", "INVALID_ARGUMENT"):
        key = {**labels, "grpc_code": code_name}
        assert value(after, "grpc_server_handled_total", **key) == (
            value(before, "grpc_server_handled_total", **key) + 1
        )
    assert value(after, "grpc_server_started_total", **labels) == (
        value(before, "grpc_server_started_total", **labels) + 2
    )
    unary = {**labels, "grpc_type": "unary"}  # the gRPC series are apart from the HTTP ones
    assert value(after, "grpc_server_started_total", **unary) == value(
        before, "grpc_server_started_total", **unary
    )


def test_a_client_that_disconnects_cancels_its_call(text_bundle: Path, minilm):
    """A search whose client hangs up while it waits in the queue is cancelled at once: its
    query leaves the micro-batcher (the engine still held on another) and is never embedded,
    and the call is counted CANCELLED. Before, it stayed queued and was computed for nobody."""
    encoder = HeldEncoder(minilm, held=True)
    engine = SearchEngine(Bundle.open(text_bundle), encoder)
    one_lane = BatchingConfig(lanes=1)  # the engine held on the first call: the second waits
    config = ServerConfig(port=0, http_port=0, metrics_port=0, batching=one_lane)
    leaving = json.dumps({"query": {"text": "a cat that hangs up"}, "topK": 3}).encode()
    with BackgroundServer(engine, config) as running, ThreadPoolExecutor(1) as pool:
        url, batcher = base(running), running.server.batcher
        host, port = running.server.http_address.rsplit(":", 1)
        held = pool.submit(call, url, "/v1/search", {"query": {"text": "a held dog"}, "topK": 3})
        assert encoder.arrived(1)  # the engine is busy with it
        with socket.create_connection((host, int(port)), timeout=WAIT_S) as client:
            head = f"POST /v1/search HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json"
            client.sendall(f"{head}\r\ncontent-length: {len(leaving)}\r\n\r\n".encode() + leaving)
            wait_for(lambda: batcher.waiting == 1, WAIT_S, "the second search queued")
        wait_for(lambda: batcher.waiting == 0, WAIT_S, "its query taken out of the queue")
        assert len(encoder.batches) == 1  # still held on the first search
        encoder.release()
        assert held.result(WAIT_S)[0] == 200
        found = samples(_scrape(running))
    assert "a cat that hangs up" not in encoder.texts
    labels = {"grpc_type": "http", "grpc_service": SEARCH, "grpc_method": "Search"}
    assert value(found, "grpc_server_handled_total", **labels, grpc_code="CANCELLED") == 1
    assert value(found, "grpc_server_handled_total", **labels, grpc_code="OK") == 1


def _scrape(server: BackgroundServer) -> str:
    port = server.server.metrics_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def test_the_page_and_its_static_files_are_served(http: BackgroundServer):
    url = base(http)
    code, page = call(url, "/")
    assert code == 200 and b'id="search-form"' in page
    code, script = call(url, "/static/app.js")
    assert code == 200 and b"/v1/search" in script
    for path in ("/static/../server.py", "/static/%2e%2e/server.py", "/static/..%2fserver.py"):
        code, _ = call(url, path)
        assert code == 404, path


# --- thumbnails ----------------------------------------------------------------------------------


def _png(path: Path, colour: tuple[int, int, int], size: tuple[int, int]) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)
    return path


@pytest.fixture(scope="module")
def image_bundle(tmp_path_factory: pytest.TempPathFactory, tiny_clip) -> Path:
    """An open_clip bundle over solid-colour PNGs (their paths in its image_path column)."""
    return build_image_bundle(tmp_path_factory.mktemp("images"), tiny_clip, _png, per_colour=2)


def test_thumbnails_come_from_the_image_root(image_bundle: Path, tiny_clip):
    engine = SearchEngine(Bundle.open(image_bundle), tiny_clip)
    with BackgroundServer(engine, ServerConfig(port=0, http_port=0)) as running:
        url = base(running)
        code, answer = call(
            url,
            "/v1/search",
            {"query": {"text": "a red square"}, "topK": 3, "metadataFields": ["image_path"]},
        )
        assert code == 200 and answer["hits"][0]["metadata"]["image_path"].endswith(".png")
        row = answer["hits"][0]["row"]
        code, jpeg = call(url, f"/thumbnails/{row}?version={answer['bundleVersion']}")
        assert code == 200 and jpeg[:3] == b"\xff\xd8\xff"  # a JPEG, re-encoded from the PNG
        for path in (
            f"/thumbnails/{engine.bundle.rows}",
            "/thumbnails/-1",
            f"/thumbnails/{row}?version=99",
            "/thumbnails/../../etc/passwd",
            "/thumbnails/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
            "/thumbnails/0/../../../etc/passwd",
            "/thumbnails/99999999999999999999999",
        ):
            code, answer = call(url, path)
            assert code == 404, path


def test_no_image_outside_the_root_is_served(image_bundle: Path, tmp_path: Path):
    bundle = Bundle.open(image_bundle)
    images = BundleImages(bundle)
    assert not Path(images.paths[0]).is_absolute()  # stored relative to the corpus root
    root = recorded_image_root(bundle)
    assert root is not None and images.root == root.resolve()
    first = images.path_of(0)
    assert first.is_relative_to(images.root)
    assert images.thumbnail(0)[:2] == b"\xff\xd8"
    # a narrower root: rows whose image lies beside it, not in it, are refused
    narrow = tmp_path / "narrow"
    narrow.mkdir()
    (narrow / "link.png").symlink_to(first)  # a link inside the root, leading out
    assert not inside(narrow / "link.png", narrow)
    refused = BundleImages(bundle, root=narrow)
    with pytest.raises(Exception, match="not under the image root"):
        refused.thumbnail(0)
    assert not inside(narrow / ".." / "narrow", narrow)  # the root itself is no image
    assert inside(first, root)
    assert common_root(["/a/b/c.png", "/a/b/d/e.png"]) == Path("/a/b")
    assert common_root(["/a/c.png", "/b/e.png"]) is None  # no root would be the whole disk


def test_text_bundles_serve_no_thumbnails(http: BackgroundServer):
    code, answer = call(base(http), "/thumbnails/0")
    assert code == 404 and "serves no images" in answer["error"]["message"]


def test_the_http_api_stops_with_the_server(engine: SearchEngine):
    running = BackgroundServer(engine, ServerConfig(port=0, http_port=0)).start()
    url = base(running)
    assert call(url, "/healthz")[0] == 200
    running.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/healthz", timeout=5)


def test_a_fuzz_of_bad_requests_gets_4xx_and_no_path_leaks(image_bundle: Path, tiny_clip):
    from tests.robustness.http_fuzz import run_http_fuzz

    engine = SearchEngine(Bundle.open(image_bundle), tiny_clip)
    with BackgroundServer(engine, ServerConfig(port=0, http_port=0)) as running:
        report = run_http_fuzz(running.server.http_address, requests=300, seed=1, max_seconds=90)
        assert call(base(running), "/healthz")[0] == 200
    assert report["sent"] == 300 and report["5xx"] == 0 and not report["leaks"], report
    assert report["4xx"] > 150 and report["kinds"]["traversal"].get("2xx", 0) == 0
    grown = ("where", "group_by", "plan", "min_recall", "batch_size")  # the API's newer fields
    assert {f"grpc:{kind}" for kind in grown} <= set(report["kinds"])
    assert report["ok"], report
