"""One version per call: a BatchSearch worked through in chunks, a Search and an Explain are
answered by the engine version served when they started, even when hot swaps land between the
chunks; the swapped-out version is released when its last call ends.

The swaps are forced, not raced: the encoder is held, so each chunk of the batch waits in it
while the test swaps the served engine, then lets that one chunk through; a hand clock makes
every chunk after the first `max_batch` items (service/serving/batching.py). The mixed-version count
is printed (`-s`): the same test on the base commit counts the batches that two versions
answered."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from serving_helpers import QUERIES, HandClock, HeldEncoder
from waiting import WAIT_S, wait_for

from indexer.format.bundle import Bundle
from indexer.update.rows import DeleteConfig, delete_rows
from service._generated.strata.v1 import search_pb2 as pb
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.results import SearchQuery
from service.serving.batching import BatchingConfig

BATCHES = 8
ITEMS = 5  # chunks of 1, 2 and 2 items at max_batch 2: a swap lands during each of them
CHUNKS = 3


@pytest.fixture
def versions(text_bundle: Path, tmp_path: Path) -> tuple[Path, Path]:
    """Two versions of the session's text bundle: v000001, and v000002 without its row 0."""
    bundles = Path(shutil.copytree(text_bundle, tmp_path / "bundles"))
    first = bundles / Bundle.open(bundles).name
    row_id = Bundle.open(bundles).ids([0])[0]
    second = delete_rows(DeleteConfig(bundles=bundles, ids=(row_id,), verify_sample=4))
    return first, bundles / second.name


def test_swaps_between_the_chunks_of_a_batch_leave_it_one_version(versions, minilm, capsys):
    encoder = HeldEncoder(minilm, held=True)
    one = SearchEngine(Bundle.open_version(versions[0]), encoder)
    two = one.with_bundle(Bundle.open_version(versions[1]))
    config = ServerConfig(port=0, batching=BatchingConfig(max_batch=2))
    mixed, answered = 0, []
    with (
        BackgroundServer(one, config, clock=HandClock()) as background,
        StrataClient(background.target, timeout=WAIT_S) as client,
        ThreadPoolExecutor(1) as caller,
    ):
        server = background.server
        for batch in range(BATCHES):
            texts = [f"{QUERIES[i % len(QUERIES)]} {batch}-{i}" for i in range(ITEMS)]
            calls = len(encoder.batches)
            answer = caller.submit(client.batch_search, [SearchQuery.of(t, k=3) for t in texts])
            for chunk in range(CHUNKS):
                assert encoder.arrived(calls + chunk + 1), f"chunk {chunk} of batch {batch}"
                serving = server.served.engine
                server.swap_engine(two if serving is one else one)  # while the chunk runs
                encoder.let_through()
            found = [r.bundle_version for r in answer.result(WAIT_S)]
            mixed += len(set(found)) > 1
            answered.append(found)
    assert [len(b) for b in encoder.batches] == [1, 2, 2] * BATCHES  # a swap in every chunk
    with capsys.disabled():
        print(f"\nmixed-version batches across forced swaps: {mixed} of {BATCHES}")
    assert mixed == 0, answered
    started_on = [one.bundle.version, two.bundle.version] * (BATCHES // 2)  # 3 swaps each
    assert [b[0] for b in answered] == started_on


def test_the_old_version_is_released_when_its_last_call_ends(versions, minilm):
    encoder = HeldEncoder(minilm, held=True)
    one = SearchEngine(Bundle.open_version(versions[0]), encoder)
    two = one.with_bundle(Bundle.open_version(versions[1]))
    config = ServerConfig(port=0, batching=BatchingConfig(max_batch=2))
    with (
        BackgroundServer(one, config, clock=HandClock()) as background,
        StrataClient(background.target, timeout=WAIT_S) as client,
        ThreadPoolExecutor(2) as callers,
    ):
        server, served = background.server, background.server.served
        texts = [f"a red car {i}" for i in range(ITEMS)]
        batch = callers.submit(client.batch_search, [SearchQuery.of(t, k=3) for t in texts])
        assert encoder.arrived(1)  # its first chunk is in the encoder
        explain = callers.submit(client.explain, "a dog", row=5)  # behind it, on the engine
        wait_for(lambda: served.leases(one) == 2, WAIT_S, "the batch and the explain on v1")
        assert server.swap_engine(two) is one
        assert served.retired == [one] and served.released == 0  # two calls still hold it
        encoder.release()
        results, why = batch.result(WAIT_S), explain.result(WAIT_S)
        wait_for(lambda: served.released == 1, WAIT_S, "v1 released")
        assert served.retired == [] and served.leases(one) == 0
        assert {r.bundle_version for r in results} == {why.bundle_version} == {one.bundle.version}
        assert client.search("a cat", k=3).bundle_version == two.bundle.version


def test_a_batch_names_its_version_even_when_empty(versions, minilm):
    engine = SearchEngine(Bundle.open_version(versions[1]), minilm)
    with (
        BackgroundServer(engine, ServerConfig(port=0)) as background,
        StrataClient(background.target) as client,
    ):
        empty = client._call("BatchSearch", pb.BatchSearchRequest())
        two = client._call(
            "BatchSearch",
            pb.BatchSearchRequest(
                requests=[
                    pb.SearchRequest(query=pb.Query(text="a dog"), top_k=2),
                    pb.SearchRequest(query=pb.Query(text="a cat"), top_k=2),
                ]
            ),
        )
    assert empty.bundle_version == engine.bundle.version and not empty.responses
    assert two.bundle_version == engine.bundle.version
    assert [r.bundle_version for r in two.responses] == [engine.bundle.version] * 2
