"""Every bad input through a real server: INVALID_ARGUMENT with a message naming the fault;
RESOURCE_EXHAUSTED for an oversize message or a full queue; DEADLINE_EXCEEDED for a query whose
deadline passed while it waited (dropped, never computed)."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from search_gallery import build_image_bundle
from serving_helpers import HandClock, HeldEncoder
from waiting import WAIT_S, wait_for

from indexer.format.bundle import Bundle
from service._generated.strata.v1 import search_pb2 as pb
from service._generated.strata.v1 import search_pb2_grpc
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient, StrataClientError
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.errors import DeadlineError
from service.serving.batching import BatchingConfig, MicroBatcher

INVALID = grpc.StatusCode.INVALID_ARGUMENT
DOG = pb.Query(text="a dog")


def vector(*values: float) -> pb.Query:
    return pb.Query(vector=pb.FloatVector(values=list(values)))


@pytest.fixture(scope="module")
def stub(server: BackgroundServer) -> Iterator[search_pb2_grpc.SearchServiceStub]:
    with grpc.insecure_channel(server.target) as channel:
        yield search_pb2_grpc.SearchServiceStub(channel)


def refused(call, request, code=INVALID) -> str:
    """The details of the status `call(request)` fails with (asserted to be `code`)."""
    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=30)
    assert caught.value.code() == code, caught.value.details()
    return caught.value.details()


SEARCHES = {
    "no query": (pb.SearchRequest(), r"the query is empty: give a text, an image or a vector"),
    "empty text": (pb.SearchRequest(query=pb.Query(text="")), r"empty text query"),
    "blank text": (pb.SearchRequest(query=pb.Query(text=" \n\t")), r"empty text query"),
    "oversize text": (
        pb.SearchRequest(query=pb.Query(text="dog " * 501)),
        r"text query of 2004 characters; at most 2000",
    ),
    "short vector": (
        pb.SearchRequest(query=vector(0.5, 0.5)),
        r"the vector has 2 values; the bundle's dimension is 384",
    ),
    "long vector": (
        pb.SearchRequest(query=vector(*[0.1] * 385)),
        r"the vector has 385 values; the bundle's dimension is 384",
    ),
    "empty vector": (pb.SearchRequest(query=vector()), r"the vector has 0 values"),
    "NaN vector": (
        pb.SearchRequest(query=vector(*[0.1] * 383, float("nan"))),
        r"the vector holds NaN or Inf",
    ),
    "+Inf vector": (
        pb.SearchRequest(query=vector(float("inf"), *[0.1] * 383)),
        r"NaN or Inf",
    ),
    "-Inf vector": (
        pb.SearchRequest(query=vector(*[0.1] * 200, float("-inf"), *[0.1] * 183)),
        r"NaN or Inf",
    ),
    "zero vector": (pb.SearchRequest(query=vector(*[0.0] * 384)), r"the vector is all zeros"),
    "top_k 0": (pb.SearchRequest(query=DOG, top_k=0), r"top_k must lie in \[1, 1000\], got 0"),
    "top_k negative": (pb.SearchRequest(query=DOG, top_k=-3), r"top_k must lie .* got -3"),
    "top_k 1001": (pb.SearchRequest(query=DOG, top_k=1001), r"top_k must lie .* got 1001"),
    "granularity 42": (
        pb.SearchRequest(query=DOG, granularity=42),
        r"granularity 42 is out of range; known values: 0 \(GRANULARITY_UNSPECIFIED\)",
    ),
    "granularity -1": (
        pb.SearchRequest(query=DOG, granularity=-1),
        r"granularity -1 is out of range",
    ),
    "unknown concept name": (
        pb.SearchRequest(
            query=DOG, filter=pb.ConceptFilter(require=[pb.ConceptRef(name="unicorn")])
        ),
        r"unknown concept 'unicorn' in require",
    ),
    "unknown concept id": (
        pb.SearchRequest(query=DOG, filter=pb.ConceptFilter(exclude=[pb.ConceptRef(id=100_000)])),
        r"unknown concept #100000 in exclude",
    ),
    "negative concept id": (
        pb.SearchRequest(query=DOG, filter=pb.ConceptFilter(require=[pb.ConceptRef(id=-4)])),
        r"concept #-4",
    ),
    "unknown concept label": (
        pb.SearchRequest(
            query=DOG, filter=pb.ConceptFilter(require=[pb.ConceptRef(label="+99999")])
        ),
        r"\+99999",
    ),
    "malformed concept label": (
        pb.SearchRequest(query=DOG, filter=pb.ConceptFilter(require=[pb.ConceptRef(label="+x1")])),
        r"'\+x1'",
    ),
    "empty concept label": (  # once an IndexError that failed the query's whole batch
        pb.SearchRequest(query=DOG, filter=pb.ConceptFilter(exclude=[pb.ConceptRef(label="")])),
        r"unknown concept .*in exclude: not a concept label: ''",
    ),
    "empty concept reference": (
        pb.SearchRequest(query=DOG, filter=pb.ConceptFilter(require=[pb.ConceptRef()])),
        r"a concept reference sets none of id, label or name",
    ),
    "unknown metadata field": (
        pb.SearchRequest(query=DOG, metadata_fields=["caption", "colour"]),
        r"unknown metadata field\(s\) 'colour'; the bundle has",
    ),
    "plan kind outside the enum": (
        pb.SearchRequest(query=DOG, plan=pb.SearchPlan(kind=9)),
        r"unknown search plan '<unknown plan 9>'; choose from auto, direct, funnel",
    ),
    "funnel shortlist prefix outside the contract": (
        pb.SearchRequest(
            query=DOG,
            granularity=pb.GRANULARITY_FULL,
            plan=pb.SearchPlan(kind=pb.PLAN_KIND_FUNNEL, shortlist_prefix=30),
        ),
        r"shortlist prefix 30 is not a prefix of the bundle below the target 384",
    ),
    "funnel factor out of range": (
        pb.SearchRequest(query=DOG, plan=pb.SearchPlan(factor=-3)),
        r"the funnel factor must lie in \[1, 1000\] \(0: the server's\), got -3",
    ),
    "funnel fields on a direct plan": (
        pb.SearchRequest(query=DOG, plan=pb.SearchPlan(kind=pb.PLAN_KIND_DIRECT, factor=10)),
        r"a direct plan takes no shortlist prefix or factor",
    ),
    "image to a text encoder": (
        pb.SearchRequest(query=pb.Query(image=b"\x89PNG\r\n")),
        r"has no image tower: image queries need a bundle embedded with open_clip",
    ),
}


@pytest.mark.parametrize("case", list(SEARCHES))
def test_a_bad_search_is_invalid_argument_naming_the_fault(stub, case: str):
    request, message = SEARCHES[case]
    details = refused(stub.Search, request)
    assert re.search(message, details), details
    batch = pb.BatchSearchRequest(requests=[pb.SearchRequest(query=DOG), request])
    in_batch = refused(stub.BatchSearch, batch)
    assert in_batch.startswith("request 1: ") and re.search(message, in_batch), in_batch


def test_an_oversize_batch_is_refused_before_any_work(stub):
    batch = pb.BatchSearchRequest(requests=[pb.SearchRequest(query=DOG)] * 257)
    assert refused(stub.BatchSearch, batch) == "257 requests in one batch; at most 256"


def test_bytes_that_are_no_message_are_invalid_argument(server: BackgroundServer):
    with grpc.insecure_channel(server.target) as channel:
        raw = channel.unary_unary("/strata.v1.SearchService/Search")  # bytes in, bytes out
        for junk, fault in (
            (b"\xff\xff\xff", "Wire format was corrupt"),
            (b"\x0a\x03\x0a\x01\xff", "bad UTF-8"),  # query.text holding invalid UTF-8
        ):
            details = refused(raw, junk)
            assert details.startswith("the request is not a valid strata.v1.SearchRequest")
            assert fault in details
        assert "the query is empty" in refused(raw, b"")  # no bytes: an empty request


@pytest.mark.parametrize(
    ("call", "request_message", "code", "message"),
    [
        ("Explain", pb.ExplainRequest(query=DOG), INVALID, r"name the item: set item_id or row"),
        ("Explain", pb.ExplainRequest(item_id="scene-0000001"), INVALID, r"give one query"),
        (
            "Explain",
            pb.ExplainRequest(query=vector(float("nan"), *[0.1] * 383), row=1),
            INVALID,
            r"NaN or Inf",
        ),
        ("Explain", pb.ExplainRequest(query=DOG, item_id=""), INVALID, r"empty item id"),
        (
            "Explain",
            pb.ExplainRequest(query=DOG, row=300),
            grpc.StatusCode.NOT_FOUND,
            r"row 300 outside \[0, 300\)",
        ),
        (
            "ListConcepts",
            pb.ListConceptsRequest(page_size=1001),
            INVALID,
            r"page_size must lie in \[1, 1000\], got 1001",
        ),
        ("ListConcepts", pb.ListConceptsRequest(page_size=-1), INVALID, r"got -1"),
        (
            "ListConcepts",
            pb.ListConceptsRequest(page_token="abc"),
            INVALID,
            r"invalid page token 'abc'",
        ),
        ("GetConcept", pb.GetConceptRequest(), INVALID, r"name the concept"),
        (
            "GetConcept",
            pb.GetConceptRequest(concept=pb.ConceptRef()),
            INVALID,
            r"sets none of id, label or name",
        ),
    ],
)
def test_other_methods_name_the_fault(stub, call: str, request_message, code, message: str):
    details = refused(getattr(stub, call), request_message, code)
    assert re.search(message, details), details


def test_vectors_of_extreme_magnitude_search_like_unit_ones(stub):
    def ids(values: list[float]) -> list[str]:
        response = stub.Search(pb.SearchRequest(query=vector(*values), top_k=5), timeout=30)
        return [h.id for h in response.hits]

    direction = [1.0 if i % 3 else -0.5 for i in range(384)]
    expected = ids(direction)
    assert len(expected) == 5
    assert ids([3e37 * v for v in direction]) == expected  # float32 norms would overflow
    assert ids([1e-30 * v for v in direction]) == expected  # ... or underflow


def test_an_undecodable_image_is_invalid_argument(tmp_path: Path, tiny_clip, write_png):
    engine = SearchEngine(
        Bundle.open(build_image_bundle(tmp_path, tiny_clip, write_png)), tiny_clip
    )
    with (
        BackgroundServer(engine, ServerConfig(port=0)) as running,
        StrataClient(running.target) as client,
    ):
        for junk in (b"\x89PNG\r\n\x1a\n truncated", b"plain bytes, no image", b"\x00"):
            with pytest.raises(StrataClientError, match="undecodable image") as caught:
                client.search(image=junk)
            assert caught.value.code == INVALID
        with pytest.raises(StrataClientError, match="empty image query"):
            client.search(image=b"")


def test_an_oversize_message_is_resource_exhausted_by_grpc(engine: SearchEngine):
    config = ServerConfig(port=0, max_message_bytes=64 * 1024)
    with (
        BackgroundServer(engine, config) as running,
        grpc.insecure_channel(running.target, options=[("grpc.max_send_message_length", -1)]) as ch,
    ):
        stub = search_pb2_grpc.SearchServiceStub(ch)
        big = pb.SearchRequest(query=pb.Query(image=b"\x00" * (100 * 1024)))
        details = refused(stub.Search, big, grpc.StatusCode.RESOURCE_EXHAUSTED)
        assert "larger than max" in details or "exceeds" in details, details
        assert len(stub.Search(pb.SearchRequest(query=DOG, top_k=1), timeout=30).hits) == 1


def test_a_query_whose_deadline_passes_in_the_queue_is_never_computed(text_bundle, minilm):
    """The engine is held on one query while a second waits in the queue; the batcher's clock,
    moved by hand, passes the waiting query's deadline: it is answered DEADLINE_EXCEEDED,
    counted, and never embedded, and the queue takes queries again."""
    encoder, clock = HeldEncoder(minilm, held=True), HandClock()
    engine = SearchEngine(Bundle.open(text_bundle), encoder)
    batching = BatchingConfig(max_batch=1, max_wait_ms=0, max_queue=1, lanes=1)  # one engine
    config = ServerConfig(port=0, batching=batching)
    with (
        BackgroundServer(engine, config, clock=clock) as running,
        StrataClient(running.target, timeout=WAIT_S) as client,
        ThreadPoolExecutor(2) as pool,
    ):
        held = pool.submit(client.search, "a held dog")
        assert encoder.arrived(1)  # the engine is busy with it
        late = pool.submit(client.search, "a late cat")
        wait_for(lambda: running.server.batcher.waiting == 1, WAIT_S, "the late query queued")
        with pytest.raises(StrataClientError, match="the query queue is full") as full:
            client.search("one too many")
        assert full.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        clock.advance(2 * WAIT_S)  # past the late query's deadline (WAIT_S), while it waits
        encoder.release()
        assert held.result(WAIT_S).hits
        with pytest.raises(StrataClientError, match="dropped unprocessed") as caught:
            late.result(WAIT_S)
        assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert client.search("a queued horse").hits  # the queue is free again
        registry = running.server.metrics.registry
        labels = {"grpc_type": "unary", "grpc_service": "strata.v1.SearchService"}
        labels |= {"grpc_method": "Search", "grpc_code": "DEADLINE_EXCEEDED"}
        wait_for(
            lambda: registry.get_sample_value("grpc_server_handled_total", labels) == 1,
            WAIT_S,
            "the expired call counted",
        )
    assert encoder.batches == [["a held dog"], ["a queued horse"]]  # the late cat: never embedded
    assert running.server.batcher.stats.expired == 1


def test_the_batcher_drops_an_expired_item_unprocessed():
    async def scenario() -> tuple[list[list[str]], BaseException | None, int]:
        started, release = threading.Event(), threading.Event()
        seen: list[list[str]] = []
        clock = HandClock()

        def process(items: list[str]) -> list[str]:
            seen.append(list(items))
            started.set()
            release.wait(WAIT_S)
            return [item.upper() for item in items]

        with ThreadPoolExecutor(1) as pool:
            batcher: MicroBatcher[str, str] = MicroBatcher(
                process, BatchingConfig(max_batch=1, max_wait_ms=0), pool, clock
            )
            first = asyncio.ensure_future(batcher.submit("first"))
            assert await asyncio.to_thread(started.wait, WAIT_S)  # "first" is being processed
            expiring = asyncio.ensure_future(batcher.submit("late", deadline=clock() + 1))
            await asyncio.sleep(0)
            assert batcher.waiting == 1
            clock.advance(2)  # its deadline passes while "first" is processed
            release.set()
            assert await first == "FIRST"
            error = None
            try:
                await expiring
            except DeadlineError as exc:
                error = exc
            with pytest.raises(DeadlineError, match="before the query was queued"):
                await batcher.submit("already late", deadline=clock() - 1)
            await batcher.close()
        return seen, error, batcher.stats.expired

    seen, error, expired = asyncio.run(scenario())
    assert seen == [["first"]] and expired == 2
    assert error is not None and "after 2.000 s in the queue; the query was dropped" in str(error)
