"""Bounded work per request, through real servers: every documented limit (service/limits.py)
answered at the limit and refused with INVALID_ARGUMENT just past it; status messages quote at
most a short prefix of any input, on every RPC; a small query is not held behind the largest
allowed request; excess load at concurrency 128 is refused fast with RESOURCE_EXHAUSTED and
nothing else fails; stopping ends the largest batch at the grace."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from serving_helpers import HandClock, HeldEncoder
from waiting import WAIT_S, wait_for

from indexer.format.bundle import Bundle
from service._generated.strata.v1 import search_pb2 as pb
from service._generated.strata.v1 import search_pb2_grpc
from service.api.background import BackgroundServer
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.errors import MESSAGE_CHARS
from service.limits import LIMITS, MAX_REQUEST_BYTES
from service.serving.batching import BatchingConfig

# a server whose engine runs one batch at a time: what the tests of the order in one lane need
ONE_LANE = ServerConfig(port=0, batching=BatchingConfig(lanes=1))

INVALID = grpc.StatusCode.INVALID_ARGUMENT
DOG = pb.Query(text="a dog")
BIG = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


@pytest.fixture(scope="module")
def stub(server: BackgroundServer) -> Iterator[search_pb2_grpc.SearchServiceStub]:
    with grpc.insecure_channel(server.target, options=BIG) as channel:
        yield search_pb2_grpc.SearchServiceStub(channel)


def outcome(call, request) -> tuple[grpc.StatusCode, str]:
    try:
        call(request, timeout=60)
    except grpc.RpcError as exc:
        return exc.code(), exc.details()
    return grpc.StatusCode.OK, ""


def labels(n: int) -> list[pb.ConceptRef]:
    return [pb.ConceptRef(label=f"+{i}") for i in range(n)]


def search(**fields) -> pb.SearchRequest:
    return pb.SearchRequest(query=DOG, top_k=5, **fields)


def search_k(k: int, **fields) -> pb.SearchRequest:
    return pb.SearchRequest(query=DOG, top_k=k, **fields)


# (request at the limit, expected code), (request just past it, message)
def limit_cases(limit: int, name: int, field: int, ident: int, lookup: int):
    at = "x" * name
    return {
        "concept references": (
            (lambda s: s.Search, search(filter=pb.ConceptFilter(exclude=labels(limit)))),
            grpc.StatusCode.OK,
            (lambda s: s.Search, search(filter=pb.ConceptFilter(exclude=labels(limit + 1)))),
            f"{limit + 1} concept references (require + exclude); at most {limit}",
        ),
        "references split over require and exclude": (
            (
                lambda s: s.Search,
                search(filter=pb.ConceptFilter(require=labels(1), exclude=labels(limit - 1))),
            ),
            grpc.StatusCode.OK,
            (
                lambda s: s.Search,
                search(filter=pb.ConceptFilter(require=labels(2), exclude=labels(limit - 1))),
            ),
            f"{limit + 1} concept references",
        ),
        "reference name length": (
            (lambda s: s.Search, search(filter=pb.ConceptFilter(require=[pb.ConceptRef(name=at)]))),
            INVALID,  # at the limit: looked up, and unknown
            (
                lambda s: s.Search,
                search(filter=pb.ConceptFilter(require=[pb.ConceptRef(name=at + "x")])),
            ),
            f"a concept reference of {name + 1} characters",
        ),
        "explained hits": (
            (lambda s: s.Search, search_k(LIMITS.explain_hits, explain=True)),
            grpc.StatusCode.OK,
            (lambda s: s.Search, search_k(LIMITS.explain_hits + 1, explain=True)),
            f"explain covers at most {LIMITS.explain_hits} hits",
        ),
        "metadata fields": (
            (lambda s: s.Search, search(metadata_fields=["id"] * LIMITS.metadata_fields)),
            grpc.StatusCode.OK,
            (lambda s: s.Search, search(metadata_fields=["id"] * (LIMITS.metadata_fields + 1))),
            f"{LIMITS.metadata_fields + 1} metadata fields; at most {LIMITS.metadata_fields}",
        ),
        "metadata field name length": (
            (lambda s: s.Search, search(metadata_fields=["f" * field])),
            INVALID,  # at the limit: unknown field
            (lambda s: s.Search, search(metadata_fields=["f" * (field + 1)])),
            f"a metadata field name of {field + 1} characters",
        ),
        "batch size": (
            (
                lambda s: s.BatchSearch,
                pb.BatchSearchRequest(requests=[search()] * LIMITS.batch_requests),
            ),
            grpc.StatusCode.OK,
            (
                lambda s: s.BatchSearch,
                pb.BatchSearchRequest(requests=[search()] * (LIMITS.batch_requests + 1)),
            ),
            f"{LIMITS.batch_requests + 1} requests in one batch; at most {LIMITS.batch_requests}",
        ),
        "item id length": (
            (lambda s: s.Explain, pb.ExplainRequest(query=DOG, item_id="i" * ident)),
            grpc.StatusCode.NOT_FOUND,
            (lambda s: s.Explain, pb.ExplainRequest(query=DOG, item_id="i" * (ident + 1))),
            f"an item id of {ident + 1} characters",
        ),
        "text length": (
            (lambda s: s.Search, pb.SearchRequest(query=pb.Query(text="d" * LIMITS.text_chars))),
            grpc.StatusCode.OK,
            (
                lambda s: s.Search,
                pb.SearchRequest(query=pb.Query(text="d" * (LIMITS.text_chars + 1))),
            ),
            f"text query of {LIMITS.text_chars + 1} characters",
        ),
        "concept name look-up": (
            (lambda s: s.GetConcept, pb.GetConceptRequest(concept=pb.ConceptRef(name=at))),
            grpc.StatusCode.NOT_FOUND,
            (lambda s: s.GetConcept, pb.GetConceptRequest(concept=pb.ConceptRef(name=at + "y"))),
            f"a concept reference of {name + 1} characters",
        ),
        "name_contains": (
            (lambda s: s.ListConcepts, pb.ListConceptsRequest(name_contains="n" * lookup)),
            grpc.StatusCode.OK,
            (lambda s: s.ListConcepts, pb.ListConceptsRequest(name_contains="n" * (lookup + 1))),
            f"name_contains of {lookup + 1} characters",
        ),
        "page token": (
            (lambda s: s.ListConcepts, pb.ListConceptsRequest(page_token="9" * lookup)),
            INVALID,  # at the limit: not a page of this catalog
            (lambda s: s.ListConcepts, pb.ListConceptsRequest(page_token="9" * (lookup + 1))),
            f"a page token of {lookup + 1} characters",
        ),
    }


CASES = limit_cases(
    LIMITS.concept_refs, LIMITS.ref_chars, LIMITS.field_chars, LIMITS.id_chars, LIMITS.lookup_chars
)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_limit_is_answered_at_and_refused_just_past(stub, case: str):
    (at_call, at_request), at_code, (past_call, past_request), message = CASES[case]
    code, details = outcome(at_call(stub), at_request)
    assert code == at_code, details
    assert "at most" not in details, details  # not refused for its size
    code, details = outcome(past_call(stub), past_request)
    assert code == INVALID and message in details, details


def test_a_request_over_the_message_limit_is_resource_exhausted(stub):
    fits = pb.SearchRequest(query=pb.Query(image=b"\x00" * (MAX_REQUEST_BYTES - 64)))
    assert outcome(stub.Search, fits)[0] == INVALID  # (not an image: refused for that)
    over = pb.SearchRequest(query=pb.Query(image=b"\x00" * (MAX_REQUEST_BYTES + 1)))
    assert outcome(stub.Search, over)[0] == grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.mark.parametrize(
    "method",
    ["Search", "BatchSearch", "Explain", "GetConcept", "ListConcepts", "field", "scope"],
)
def test_status_messages_quote_a_short_prefix_of_a_huge_input(stub, method: str):
    huge = "q" * 3_000_000
    call, request = {
        "Search": (
            stub.Search,
            search(filter=pb.ConceptFilter(require=[pb.ConceptRef(name=huge)])),
        ),
        "BatchSearch": (
            stub.BatchSearch,
            pb.BatchSearchRequest(requests=[search(metadata_fields=[huge])]),
        ),
        "Explain": (stub.Explain, pb.ExplainRequest(query=DOG, item_id=huge)),
        "GetConcept": (stub.GetConcept, pb.GetConceptRequest(concept=pb.ConceptRef(name=huge))),
        "ListConcepts": (stub.ListConcepts, pb.ListConceptsRequest(page_token=huge)),
        "field": (stub.Search, search(metadata_fields=[huge])),
        "scope": (
            stub.Search,
            search(filter=pb.ConceptFilter(exclude=[pb.ConceptRef(label=huge)])),
        ),
    }[method]
    code, details = outcome(call, request)
    assert code == INVALID, details
    assert len(details) <= MESSAGE_CHARS and "q" * 41 not in details, details[:200]
    assert "(3000000 characters)" in details, details


def test_a_small_query_is_not_held_behind_the_largest_batch(text_bundle, minilm):
    """One lane: small queries that arrive while a chunk of the largest BatchSearch runs go
    next, in a batch of their own, and are answered while the rest of the large request still
    waits."""
    encoder = HeldEncoder(minilm, held=True)
    engine = SearchEngine(Bundle.open(text_bundle), encoder)
    largest = pb.BatchSearchRequest(
        requests=[
            pb.SearchRequest(query=pb.Query(text=f"a dog number {i}"), top_k=10)
            for i in range(LIMITS.batch_requests)
        ]
    )
    smalls = [f"a cat {i}" for i in range(3)]
    # the batcher's clock stands still: the hold is not what the items cost (chunks of 32 after)
    with (
        BackgroundServer(engine, ONE_LANE, clock=HandClock()) as running,
        grpc.insecure_channel(running.target) as channel,
        ThreadPoolExecutor(1 + len(smalls)) as pool,
    ):
        stub = search_pb2_grpc.SearchServiceStub(channel)
        batch = pool.submit(stub.BatchSearch, largest, timeout=4 * WAIT_S)
        assert encoder.arrived(1)  # its first chunk is in the encoder
        small = [
            pool.submit(
                stub.Search, pb.SearchRequest(query=pb.Query(text=t), top_k=5), timeout=WAIT_S
            )
            for t in smalls
        ]
        batcher = running.server.batcher
        wait_for(lambda: batcher.waiting == 1 + len(smalls), WAIT_S, "the small queries queued")
        encoder.let_through(2)  # the first chunk, then the next batch
        answers = [future.result(WAIT_S) for future in small]
        assert not batch.done()  # the large request's next chunk waits at the turnstile
        encoder.release()
        assert len(batch.result(4 * WAIT_S).responses) == LIMITS.batch_requests
    first, second = encoder.batches[:2]
    assert len(first) == 1 and first[0].startswith("a dog number")
    assert sorted(second) == smalls  # the small queries together, none of the large one's
    assert all(len(answer.hits) == 5 for answer in answers)


def test_a_small_query_runs_beside_the_largest_batch(text_bundle, minilm):
    """Two lanes (the default): while a chunk of the largest BatchSearch is held in the engine,
    small queries are answered in the other lane; the large request never takes both."""
    encoder = HeldEncoder(minilm, held=True, holds=lambda texts: texts[0].startswith("a dog"))
    engine = SearchEngine(Bundle.open(text_bundle), encoder)
    largest = pb.BatchSearchRequest(
        requests=[
            pb.SearchRequest(query=pb.Query(text=f"a dog number {i}"), top_k=10)
            for i in range(LIMITS.batch_requests)
        ]
    )
    with (
        BackgroundServer(engine, ServerConfig(port=0)) as running,
        grpc.insecure_channel(running.target) as channel,
    ):
        stub = search_pb2_grpc.SearchServiceStub(channel)
        batch = stub.BatchSearch.future(largest, timeout=4 * WAIT_S)
        assert encoder.arrived(1)  # its first chunk is held in the encoder
        for i in range(3):  # one after the other, each answered while the chunk is held
            request = pb.SearchRequest(query=pb.Query(text=f"a cat {i}"))
            answer = stub.Search(request, timeout=WAIT_S)
            assert len(answer.hits) == 10
        assert not batch.done() and running.server.batcher.waiting == 1
        assert sum(texts[0].startswith("a dog") for texts in encoder.batches) == 1
        encoder.release()
        assert len(batch.result(4 * WAIT_S).responses) == LIMITS.batch_requests


@pytest.mark.parametrize("batching", [True, False], ids=["batching", "no-batching"])
def test_overload_at_concurrency_128_is_refused_fast_and_nothing_else_fails(
    text_bundle, minilm, batching: bool
):
    """128 searches at once while the engine is held on the first batch: a full queue (16)
    waits, and every other search is refused RESOURCE_EXHAUSTED while they still wait (no
    refusal waits for any computation); once the engine goes on, every queued one is served.
    The same with batching off (`--no-batching`): one search runs, 16 wait, the rest are
    refused (before, every one was admitted)."""
    encoder = HeldEncoder(minilm, held=True)
    engine = SearchEngine(Bundle.open(text_bundle), encoder)
    one_lane = BatchingConfig(enabled=batching, max_queue=16, lanes=1)  # held: one engine
    config = ServerConfig(port=0, batching=one_lane)
    calls, outcomes = 128, []

    async def load(target: str) -> None:
        async with grpc.aio.insecure_channel(target) as channel:
            aio_stub = search_pb2_grpc.SearchServiceStub(channel)

            async def one(i: int) -> None:
                request = pb.SearchRequest(query=pb.Query(text=f"a horse {i}"), top_k=3)
                try:
                    await aio_stub.Search(request, timeout=2 * WAIT_S)
                    outcomes.append("OK")
                except grpc.aio.AioRpcError as exc:
                    outcomes.append(exc.code().name)

            await asyncio.gather(*(one(i) for i in range(calls)))

    with BackgroundServer(engine, config) as running, ThreadPoolExecutor(1) as pool:
        loading = pool.submit(asyncio.run, load(running.target))
        assert encoder.arrived(1)
        admitted = len(encoder.batches[0]) + config.batching.max_queue
        wait_for(lambda: len(outcomes) >= calls - admitted, WAIT_S, "the refusals")
        while_held = list(outcomes)
        encoder.release()
        loading.result(2 * WAIT_S)
    assert while_held == ["RESOURCE_EXHAUSTED"] * (calls - admitted)
    assert sorted(outcomes) == sorted(["OK"] * admitted + while_held)
    assert batching or all(len(texts) == 1 for texts in encoder.batches)  # each alone


def test_stop_ends_the_largest_batch_at_the_grace(text_bundle, minilm):
    """Stopping while the largest batch is worked through ends its call at the grace, while
    the engine is still held on its first chunk; the items still waiting are never computed."""
    encoder = HeldEncoder(minilm, held=True)
    engine = SearchEngine(Bundle.open(text_bundle), encoder)
    largest = pb.BatchSearchRequest(
        requests=[pb.SearchRequest(query=pb.Query(text=f"a bird {i}")) for i in range(256)]
    )
    running = BackgroundServer(engine, ServerConfig(port=0, grace_s=0.5)).start()
    errors: list[grpc.StatusCode] = []

    def call() -> None:
        with grpc.insecure_channel(running.target) as channel:
            try:
                search_pb2_grpc.SearchServiceStub(channel).BatchSearch(largest, timeout=4 * WAIT_S)
            except grpc.RpcError as exc:
                errors.append(exc.code())

    with ThreadPoolExecutor(2) as pool:
        batch = pool.submit(call)
        assert encoder.arrived(1)  # its first chunk is in the encoder
        stopping = pool.submit(running.stop, 0.5)
        batch.result(WAIT_S)  # the call ended, the engine still held
        batcher = running.server.batcher
        wait_for(lambda: batcher.waiting_items == 0, WAIT_S, "its waiting items dropped")
        encoder.release()
        stopping.result(WAIT_S)
    assert errors and errors[0] != grpc.StatusCode.OK
    assert len(encoder.batches) == 1  # of its 256 items, only the first chunk was computed
