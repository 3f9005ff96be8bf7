"""End to end through a real grpc.aio server on a free local port, with the Python client."""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from search_gallery import LANTERN, LANTERN_RUNNER_UPS, build_image_bundle
from serving_helpers import CountingEncoder, HeldEncoder
from waiting import WAIT_S, wait_for

from indexer.format.bundle import Bundle
from service._generated.strata.v1 import search_pb2 as pb
from service._generated.strata.v1 import search_pb2_grpc
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient, StrataClientError
from service.api.server import ServerConfig
from service.engine.compute_threads import WARM_TEXT
from service.engine.explain import row_concepts
from service.engine.search import SearchEngine
from service.results import SearchQuery
from service.serving.batching import BatchingConfig
from service.serving.served_engine import search_pinned
from training.core.granularity import Granularity

INVALID = grpc.StatusCode.INVALID_ARGUMENT


def test_index_info_describes_the_bundle(client: StrataClient):
    info = client.index_info()
    assert (info.rows, info.dim, info.k, info.encoder, info.modality) == (
        300,
        384,
        8,
        "minilm",
        "text",
    )
    assert info.contract == {
        Granularity.OBJECT: 24,
        Granularity.ATTRIBUTE: 48,
        Granularity.RELATION: 96,
        Granularity.CAPTION: 192,
        Granularity.FULL: 384,
    }
    assert {p.factory for p in info.prefixes} == {"Flat"}
    assert "caption" in info.metadata_fields and info.concepts == 768
    assert info.bundle_version == 1 and not info.image_queries


def test_the_batcher_runs_servings_search_itself(server: BackgroundServer):
    """The micro-batcher is given serving's search_pinned (with this server's metrics): no
    call back up into the server that holds it."""
    process = server.server.batcher.calls.process
    assert process.func is search_pinned
    assert process.keywords == {"metrics": server.server.metrics}


def test_an_object_search_over_the_wire(client: StrataClient):
    result = client.search(
        "a dog", granularity="object", k=10, metadata_fields=["caption", "subject", "object"]
    )
    assert result.granularity == Granularity.OBJECT and result.prefix_length == 24
    assert len(result.hits) == 10 and result.filtered_rows is None
    dogs = sum("dog" in (h.metadata["subject"], h.metadata["object"]) for h in result.hits)
    assert dogs >= 8
    assert all(h.id.startswith("scene-") and "caption" in h.metadata for h in result.hits)
    scores = [h.score for h in result.hits]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize(
    ("text", "granularity", "length"),
    [
        ("a dog", Granularity.OBJECT, 24),
        ("a red dog", Granularity.ATTRIBUTE, 48),
        ("dog chasing a ball", Granularity.RELATION, 96),
        ("on the beach, a brown dog is chasing a red ball", Granularity.CAPTION, 192),
    ],
)
def test_auto_routing_over_the_wire(client, text: str, granularity: Granularity, length: int):
    for explicit in ("auto", ""):  # UNSPECIFIED (0) means AUTO
        result = client.search(text, k=3, granularity=explicit)
        assert (result.granularity, result.prefix_length) == (granularity, length)
        assert result.routing_reason != "requested"


def test_filters_and_explanations_over_the_wire(client: StrataClient, engine: SearchEngine):
    top = client.list_concepts(page_size=1000).concepts
    common = max(top, key=lambda c: c.active_rows)
    result = client.search("a dog", k=10, require=[common.label], explain=True)
    assert result.filtered_rows == common.active_rows > 0
    assert len(result.hits) == min(10, common.active_rows)
    ids, _ = row_concepts(engine.bundle, [h.row for h in result.hits])
    assert all(common.id in row for row in ids)
    assert result.query_concepts and all(h.concepts for h in result.hits)
    for hit in result.hits:  # one name once: its concepts' contributions (all > 0) summed
        for shared in hit.shared_concepts:
            assert shared.contribution >= shared.query_activation * shared.item_activation * (
                1 - 1e-5
            )
    excluded = client.search("a dog", k=10, exclude=[common.name])
    same_name = {c.id for c in top if c.name == common.name}
    ids, _ = row_concepts(engine.bundle, [h.row for h in excluded.hits])
    assert len(excluded.hits) == 10 and not any(set(row) & same_name for row in ids.tolist())


def test_explain_rpc(client: StrataClient):
    hit = client.search("a red dog", granularity="attribute", k=1).hits[0]
    explanation = client.explain("a red dog", item_id=hit.id)
    assert explanation.item_id == hit.id and explanation.row == hit.row
    assert [s.granularity for s in explanation.similarities] == list(Granularity)
    assert explanation.cosine(Granularity.ATTRIBUTE) == pytest.approx(hit.score, abs=1e-5)
    assert explanation.query_concepts and explanation.item_concepts
    query = {c.name for c in explanation.query_concepts}
    item = {c.name for c in explanation.item_concepts}
    shared = [s.name for s in explanation.shared_concepts]
    assert len(shared) == len(set(shared)) and set(shared) <= query & item
    by_row = client.explain("a red dog", row=hit.row).similarities  # the same item by its row
    assert [(s.granularity, s.prefix_length) for s in by_row] == [
        (s.granularity, s.prefix_length) for s in explanation.similarities
    ]
    assert [s.cosine for s in by_row] == pytest.approx(
        [s.cosine for s in explanation.similarities], abs=1e-6
    )  # the query may be embedded again (a batch of its own): equal up to float rounding
    with pytest.raises(StrataClientError) as caught:
        client.explain("a red dog", item_id="scene-9999999")
    assert caught.value.code == grpc.StatusCode.NOT_FOUND


def test_catalog_over_the_wire(client: StrataClient):
    page = client.list_concepts(page_size=300)
    assert page.total_size == 768 and len(page.concepts) == 300 and page.next_page_token
    rest = client.list_concepts(page_size=1000, page_token=page.next_page_token)
    assert [c.id for c in page.concepts + rest.concepts] == list(range(768))
    assert rest.next_page_token == ""
    entry = next(c for c in page.concepts + rest.concepts if c.name == LANTERN)
    assert client.get_concept(entry.id)[0].label == entry.label
    assert client.get_concept(entry.label)[0].id == entry.id
    named = client.get_concept(entry.name)
    assert entry.id in {c.id for c in named} and all(c.name == entry.name for c in named)
    full = named[0]
    assert [w for w, _ in full.runner_ups] == [w for w, _ in LANTERN_RUNNER_UPS] and full.examples
    assert 0 < full.frequency <= 1
    unnamed = next(c for c in page.concepts + rest.concepts if not c.named)
    assert client.get_concept(unnamed.label)[0].id == unnamed.id and unnamed.name == unnamed.label
    with pytest.raises(StrataClientError) as caught:
        client.get_concept("unicorn-that-is-no-concept")
    assert caught.value.code == grpc.StatusCode.NOT_FOUND


def test_batch_search_keeps_order_and_names_a_bad_request(client: StrataClient):
    queries = [SearchQuery.of(t, k=2) for t in ("a dog", "a red cat", "a horse pulling a box")]
    results = client.batch_search(queries)
    assert [r.granularity for r in results] == [
        Granularity.OBJECT,
        Granularity.ATTRIBUTE,
        Granularity.RELATION,
    ]
    assert [r.ids for r in results] == [client.search(q.text, k=2).ids for q in queries]
    # a batch of exactly one is answered as one (it once failed INTERNAL: "cannot unpack")
    (alone,) = client.batch_search(queries[:1])
    assert alone.ids == results[0].ids and alone.granularity == Granularity.OBJECT
    assert client.batch_search([]) == []
    with pytest.raises(StrataClientError, match="request 1: empty text query") as caught:
        client.batch_search([SearchQuery.of("a dog"), SearchQuery.of(" ")])
    assert caught.value.code == INVALID


@pytest.mark.parametrize(
    ("request_message", "message"),
    [
        (pb.SearchRequest(), "the query is empty"),
        (pb.SearchRequest(query=pb.Query(text="")), "empty text query"),
        (pb.SearchRequest(query=pb.Query(text="a dog"), top_k=0), r"top_k must lie in \[1, 1000\]"),
        (pb.SearchRequest(query=pb.Query(text="a dog"), top_k=1001), "top_k must lie"),
        (
            pb.SearchRequest(query=pb.Query(vector=pb.FloatVector(values=[0.5] * 7))),
            "the vector has 7 values; the bundle's dimension is 384",
        ),
        (
            pb.SearchRequest(query=pb.Query(vector=pb.FloatVector(values=[float("nan")] * 384))),
            "NaN",
        ),
        (pb.SearchRequest(query=pb.Query(text="a dog"), granularity=42), "granularity 42"),
        (
            pb.SearchRequest(
                query=pb.Query(text="a dog"),
                filter=pb.ConceptFilter(require=[pb.ConceptRef(name="unicorn")]),
            ),
            "unknown concept 'unicorn' in require",
        ),
        (
            pb.SearchRequest(
                query=pb.Query(text="a dog"),
                filter=pb.ConceptFilter(exclude=[pb.ConceptRef(id=100_000)]),
            ),
            "unknown concept #100000 in exclude",
        ),
        (
            pb.SearchRequest(query=pb.Query(text="a dog"), metadata_fields=["colour"]),
            "unknown metadata field",
        ),
        (pb.SearchRequest(query=pb.Query(image=b"not an image")), "no image tower"),
    ],
)
def test_bad_input_is_invalid_argument_naming_the_fault(
    server: BackgroundServer, request_message: pb.SearchRequest, message: str
):
    with grpc.insecure_channel(server.target) as channel:
        stub = search_pb2_grpc.SearchServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Search(request_message, timeout=30)
    assert caught.value.code() == INVALID
    assert re.search(message, caught.value.details()), caught.value.details()


def test_health_reports_serving(server: BackgroundServer):
    with grpc.insecure_channel(server.target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for name in ("", "strata.v1.SearchService"):
            response = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
            assert response.status == health_pb2.HealthCheckResponse.SERVING


class ThreadRecordingEncoder(CountingEncoder):
    """The real encoder, recording the thread and the texts of every text call."""

    def __init__(self, encoder: object) -> None:
        super().__init__(encoder)
        self.seen: list[tuple[str, list[str]]] = []

    def encode_text(self, texts):
        self.seen.append((threading.current_thread().name, list(texts)))
        return self.wrapped.encode_text(texts)


def test_a_server_warms_its_encoder_on_its_first_lane_before_it_listens(text_bundle: Path, minilm):
    """The first call on a thread pays the model's set-up there: the server makes it on the
    lane its first query will run on, before any query can arrive."""
    encoder = ThreadRecordingEncoder(minilm)
    engine = SearchEngine(Bundle.open(text_bundle), encoder)
    with BackgroundServer(engine, ServerConfig(port=0)) as server:
        [(thread, texts)] = encoder.seen
        assert texts == [WARM_TEXT] and thread.startswith("strata-engine")
        with StrataClient(server.target, timeout=WAIT_S) as client:
            client.search("a dog on the beach", k=3)
        assert encoder.seen[1] == (thread, ["a dog on the beach"])


def test_concurrent_searches_share_one_encoder_call(text_bundle: Path, minilm):
    """Searches that arrive while the engine is busy wait together and become one call."""
    encoder = HeldEncoder(minilm, held=True)
    engine = SearchEngine(Bundle.open(text_bundle), encoder)
    config = ServerConfig(port=0, batching=BatchingConfig(max_batch=8, lanes=1))  # one engine
    texts = ["a dog", "a cat", "a red horse", "a bird", "a fox", "a boy", "a girl", "a cow"]
    with (
        BackgroundServer(engine, config) as server,
        StrataClient(server.target, timeout=WAIT_S) as client,
        ThreadPoolExecutor(len(texts) + 1) as pool,
    ):
        busy = pool.submit(client.search, "a busy engine", k=3)
        assert encoder.arrived(1)  # the engine is busy with it
        searches = [pool.submit(client.search, t, k=3) for t in texts]
        queued = server.server.batcher
        wait_for(lambda: queued.waiting == len(texts), WAIT_S, "the searches queued")
        encoder.release()
        results = [search.result(WAIT_S) for search in searches]
        assert busy.result(WAIT_S).hits
        batches = list(encoder.batches)
    assert len(batches) == 2 and sorted(batches[1]) == sorted(texts)  # one call for all eight
    expected = [engine.search(SearchQuery.of(t, k=3)).ids for t in texts]
    assert [r.ids for r in results] == expected


def test_a_full_queue_is_resource_exhausted(text_bundle: Path, minilm):
    encoder = HeldEncoder(minilm, held=True)
    engine = SearchEngine(Bundle.open(text_bundle), encoder)
    batching = BatchingConfig(max_batch=1, max_wait_ms=0, max_queue=1, lanes=1)  # one engine
    config = ServerConfig(port=0, batching=batching)
    with (
        BackgroundServer(engine, config) as server,
        StrataClient(server.target) as client,
        ThreadPoolExecutor(2) as pool,
    ):
        held = pool.submit(client.search, "a dog")
        assert encoder.arrived(1)  # the first query is in the encoder
        queued = pool.submit(client.search, "a cat")
        batcher = server.server.batcher
        wait_for(lambda: batcher.waiting == 1, WAIT_S, "the second query queued")
        with pytest.raises(StrataClientError, match="queue is full") as caught:
            client.search("a horse")
        encoder.release()
        assert held.result(WAIT_S).hits and queued.result(WAIT_S).hits
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_image_queries_through_a_tiny_open_clip_bundle(tmp_path: Path, tiny_clip, write_png):
    bundles = build_image_bundle(tmp_path, tiny_clip, write_png)
    engine = SearchEngine(Bundle.open(bundles), tiny_clip)
    with (
        BackgroundServer(engine, ServerConfig(port=0)) as server,
        StrataClient(server.target) as client,
    ):
        info = client.index_info()
        assert info.image_queries and info.modality == "image" and info.dim == 32
        picture = tmp_path / "images" / "green-2.png"
        result = client.search(image=picture.read_bytes(), k=3, metadata_fields=["caption"])
        assert result.granularity == Granularity.FULL  # AUTO on an image
        top = result.hits[0]
        assert top.id == "green-2" and top.score == pytest.approx(1.0, abs=1e-4)
        assert client.search(image=picture, k=1).ids == ["green-2"]  # a path works too
        assert len(client.search("a green square", k=5).hits) == 5  # text → image gallery
        explanation = client.explain(image=picture.read_bytes(), item_id="green-2")
        assert explanation.cosine(Granularity.FULL) == pytest.approx(1.0, abs=1e-4)
        with pytest.raises(StrataClientError, match="undecodable image") as caught:
            client.search(image=b"\x89PNG\r\n\x1a\n broken")
        assert caught.value.code == INVALID
        vector = np.asarray(tiny_clip.encode_image([picture])[0])
        assert client.search(vector=vector, k=1).ids == ["green-2"]
