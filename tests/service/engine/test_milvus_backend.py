"""The Milvus backend on Milvus Lite: export, parity with local FAISS, filters, Explain, the
alias switch under load, and the engine stopped and restarted.

Milvus Lite runs here as a real gRPC server in this process (`start_server_in_thread`), reached
by URI exactly as a cluster is; one test goes through a `.db` path and the `strata` command."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import grpc
import numpy as np
import pytest
from search_gallery import BEACON, MANY_WORDS, beacon_words, captioned_row
from serving_helpers import Searching
from two_engines import LiteServer, configured
from waiting import WAIT_S, wait_for

from indexer.format.bundle import Bundle
from indexer.format.funnel_plans import FunnelConfig
from indexer.format.manifest import MANIFEST, read_current, version_name
from indexer.milvus.export import (
    bulk_deadline,
    export_bundle,
    holds_vector_fields,
    row_concepts_csr,
)
from indexer.milvus.store import EngineUnavailable, ExportError, MilvusStore, collection_name
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient, StrataClientError
from service.api.server import ServerConfig
from service.cli.serve_setup import (
    LITE_DEADLINE_S,
    SERVER_DEADLINE_S,
    Backend,
    engine_deadline,
)
from service.engine.milvus.backend import milvus_engine as engine_over
from service.engine.milvus.backend import open_milvus
from service.engine.milvus.calibration import CALIBRATION_CHUNK, CALIBRATION_DEADLINE_S
from service.engine.milvus.expressions import concept_expression, where_expression
from service.engine.milvus.scorer import MilvusScorer
from service.engine.plans import Planner
from service.engine.scoring import EngineConfig
from service.engine.search import SearchEngine
from service.errors import QueryError, UnavailableError
from service.results import (
    ConceptRef,
    MetadataCondition,
    MetadataRange,
    SearchPlan,
    SearchQuery,
)
from service.serving.alias_follower import AliasFollower
from service.serving.batching import BatchingConfig

TEXTS = ("a dog", "a red car", "a man riding a horse", "two children in the snow", "a cat")
GRANULARITIES = ("object", "attribute", "relation", "caption", "full")


@pytest.fixture(scope="module")
def lite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiteServer]:
    running = LiteServer(tmp_path_factory.mktemp("milvus") / "lite.db")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def bundles(text_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the text bundle with a second version (the first one renumbered)."""
    root = tmp_path_factory.mktemp("bundles") / "bundles"
    shutil.copytree(text_bundle, root)
    first = read_current(root)
    second = root / version_name(2)
    shutil.copytree(root / first, second)
    manifest = json.loads((second / MANIFEST).read_text())
    manifest["version"], manifest["name"] = 2, version_name(2)
    (second / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return root


@pytest.fixture(scope="module")
def exported(lite: LiteServer, bundles: Path) -> str:
    store = MilvusStore(lite.uri, timeout_s=10)
    summary = export_bundle(Bundle.open(bundles), store, "gallery", rows_per_batch=128)
    store.close()
    assert summary.published and summary.rows == 300
    return summary.collection


@pytest.fixture(scope="module")
def milvus_engine(lite: LiteServer, bundles: Path, exported: str, minilm) -> SearchEngine:
    return open_milvus(lite.uri, bundles, "gallery", encoder=minilm, timeout_s=5)


def test_expression_of_a_concept_filter() -> None:
    assert concept_expression([], []) == ""
    assert concept_expression([[5, 3], [7]], [9, 2]) == (
        "(array_contains_any(concepts, [3, 5])) and (array_contains_any(concepts, [7])) "
        "and (not array_contains_any(concepts, [2, 9]))"
    )


def test_export_records_the_version_and_publishes_the_alias(lite: LiteServer, exported: str):
    store = MilvusStore(lite.uri)
    assert store.current("gallery") == exported == collection_name("gallery", 1)
    record = store.record(exported)
    assert (record.version, record.rows, record.prefixes) == (1, 300, (24, 48, 96, 192, 384))


def test_same_top10_as_local_flat(milvus_engine: SearchEngine, engine: SearchEngine) -> None:
    assert {p.factory for p in engine.bundle.manifest.prefixes} == {"Flat"}
    compared = 0
    for text in TEXTS:
        for granularity in GRANULARITIES:
            query = SearchQuery.of(text, granularity=granularity, k=10)
            local, remote = engine.search(query), milvus_engine.search(query)
            assert remote.ids == local.ids, (text, granularity)
            for a, b in zip(local.hits, remote.hits, strict=True):
                assert a.row == b.row and abs(a.score - b.score) < 1e-4
            compared += 1
    auto = milvus_engine.search(SearchQuery.of("a dog", k=10))
    assert auto.ids == engine.search(SearchQuery.of("a dog", k=10)).ids
    assert compared == 25


def test_hnsw_fields_reach_recall_99_against_local_flat(
    lite: LiteServer, bundles: Path, engine: SearchEngine
) -> None:
    store = MilvusStore(lite.uri, timeout_s=10)
    bundle = Bundle.open(bundles)
    summary = export_bundle(bundle, store, "gallery-hnsw", index_kind="HNSW", rows_per_batch=128)
    remote = engine_over(bundle, engine.encoder, store, summary.collection, name="gallery-hnsw")
    found = wanted = 0
    for text in TEXTS:
        for granularity in GRANULARITIES:
            query = SearchQuery.of(text, granularity=granularity, k=10)
            exact = set(engine.search(query).ids)
            found += len(exact & set(remote.search(query).ids))
            wanted += len(exact)
    store.close()
    assert wanted == 250 and found / wanted >= 0.99, found / wanted


def test_concept_filters_run_in_the_engine(milvus_engine: SearchEngine, engine: SearchEngine):
    concepts = [c for c in range(2 * engine.bundle.dim) if len(engine.bundle.postings(c)[0])]
    frequent = sorted(concepts, key=lambda c: -len(engine.bundle.postings(c)[0]))
    for require, exclude in (
        ([frequent[0]], []),
        ([], [frequent[0], frequent[1]]),
        ([frequent[1], frequent[2]], [frequent[3]]),
    ):
        query = SearchQuery.of(
            "a dog",
            granularity="caption",
            k=10,
            require=[ConceptRef(id=c) for c in require],
            exclude=[ConceptRef(id=c) for c in exclude],
        )
        local, remote = engine.search(query), milvus_engine.search(query)
        assert remote.filtered_rows == local.filtered_rows > 0
        assert remote.ids == local.ids
        allowed = set(remote.ids)
        for c in require:
            rows = set(engine.bundle.postings(c)[0].tolist())
            assert all(h.row in rows for h in remote.hits)
        for c in exclude:
            rows = set(engine.bundle.postings(c)[0].tolist())
            assert not any(h.row in rows for h in remote.hits)
        assert allowed


def test_metadata_conditions_and_groups_run_in_the_engine(
    milvus_engine: SearchEngine, engine: SearchEngine
):
    subjects = engine.metadata.column("subject").to_pylist()
    common = max(set(subjects), key=subjects.count)
    some = sorted(set(subjects))[:3]
    assert where_expression(engine.metadata, [MetadataCondition("subject", equals=common)]) == (
        f'(subject == "{common}")'
    )
    for where in (
        [MetadataCondition("subject", equals=common)],
        [MetadataCondition("subject", any_of=tuple(some))],
        [MetadataCondition("subject", range=MetadataRange(min=some[0], max=some[-1]))],
        [MetadataCondition("subject", range=MetadataRange(min=some[0], min_exclusive=True))],
    ):
        query = SearchQuery.of("a dog", granularity="caption", k=10, where=where)
        local, remote = engine.search(query), milvus_engine.search(query)
        assert remote.filtered_rows == local.filtered_rows > 0, where
        assert remote.ids == local.ids, where
    for size in (1, 2):
        query = SearchQuery.of(
            "a dog", granularity="object", k=5, group_by="subject", group_size=size
        )
        local, remote = engine.search(query), milvus_engine.search(query)
        assert [h.group for h in remote.hits] == [h.group for h in local.hits]
        assert len({h.group for h in remote.hits}) == 5
        assert [round(h.score, 4) for h in remote.hits] == [round(h.score, 4) for h in local.hits]
    with pytest.raises(QueryError, match="unknown metadata field 'nope'"):
        milvus_engine.search(SearchQuery.of("a dog", where=[MetadataCondition("nope", equals="x")]))


def test_explain_reads_the_row_back(milvus_engine: SearchEngine, engine: SearchEngine) -> None:
    query = SearchQuery.of("a red car")
    item = engine.search(SearchQuery.of("a red car", k=3)).hits[2].id
    local, remote = engine.explain(query, item_id=item), milvus_engine.explain(query, item_id=item)
    assert remote.row == local.row
    assert [(s.prefix_length, round(s.cosine, 4)) for s in remote.similarities] == [
        (s.prefix_length, round(s.cosine, 4)) for s in local.similarities
    ]
    assert [c.id for c in remote.item_concepts] == [c.id for c in local.item_concepts]
    assert [c.id for c in remote.shared_concepts] == [c.id for c in local.shared_concepts]
    explained = milvus_engine.search(SearchQuery.of("a red car", k=3, explain=True))
    assert explained.hits[0].concepts and explained.query_concepts


def test_explain_through_the_server_with_near_captions(
    milvus_engine: SearchEngine, engine: SearchEngine
) -> None:
    """gRPC Explain on the Milvus backend (once INTERNAL: the servicer passes near_captions,
    which the Milvus engine's Explain did not take): the local engine's answer, descriptions and
    their near captions included, the captions searched in Milvus; out-of-range near_captions
    is refused as on FAISS."""
    row = captioned_row(engine)  # a row whose description has a phrase and captions
    item = engine.bundle.ids([row])[0]
    local = engine.explain(SearchQuery.of("a red car"), item_id=item, near_captions=3)
    with (
        BackgroundServer(milvus_engine, ServerConfig(port=0)) as running,
        StrataClient(running.target, timeout=60) as client,
    ):
        remote = client.explain("a red car", item_id=item, near_captions=3)
        plain = client.explain("a red car", row=local.row)
        with pytest.raises(StrataClientError, match=r"near_captions must lie in \[0, 20\]"):
            client.explain("a red car", row=local.row, near_captions=21)
    assert (remote.item_id, remote.row) == (item, local.row)
    assert [(s.prefix_length, round(s.cosine, 4)) for s in remote.similarities] == [
        (s.prefix_length, round(s.cosine, 4)) for s in local.similarities
    ]
    for ours, theirs in (
        (remote.query_description, local.query_description),
        (remote.item_description, local.item_description),
    ):
        assert ours.phrase == theirs.phrase
        assert [c.id for c in ours.captions] == [c.id for c in theirs.captions]
        assert all(c.text for c in ours.captions)
    assert remote.item_description.phrase and remote.item_description.captions
    assert local.row not in [c.row for c in remote.item_description.captions]
    assert plain.query_description.captions == [] and plain.item_description.captions == []


def test_requested_funnel_reranks_at_the_target(milvus_engine: SearchEngine, engine: SearchEngine):
    plan = SearchPlan("funnel", 24, 50)
    query = SearchQuery.of("a man riding a horse", granularity="full", k=10, plan=plan)
    remote = milvus_engine.search(query)
    assert remote.plan.kind == "funnel" and remote.plan.shortlist_rows == 300
    assert remote.ids == engine.search(query).ids  # the shortlist holds every row here


class CountingScorer(MilvusScorer):
    """The Milvus scorer, counting the queries each engine search carries."""

    calls: ClassVar[list[int]] = []
    deadlines: ClassVar[list[float | None]] = []

    def engine_search(self, rotated, length, k, expression, setting, fields, deadline_s=None):
        CountingScorer.calls.append(len(rotated))
        CountingScorer.deadlines.append(deadline_s)
        return super().engine_search(rotated, length, k, expression, setting, fields, deadline_s)


def test_auto_funnel_is_calibrated_on_milvus_as_locally_in_small_calls(
    lite: LiteServer, bundles: Path, exported: str
) -> None:
    # the premise: a config under which the 300-row bundle calibrates a funnel (the default
    # skips galleries under 20k rows), over 3 chunks of queries
    funnel = FunnelConfig(min_rows=100, queries=3 * CALIBRATION_CHUNK, max_cost_share=1.0)
    bundle = Bundle.open(bundles)
    local = Planner(bundle, funnel)
    assert local.choices, "the premise: the local engine finds a funnel on this bundle"
    CountingScorer.calls, CountingScorer.deadlines = [], []
    store = MilvusStore(lite.uri, timeout_s=10)
    try:
        remote = CountingScorer(bundle, store, exported, EngineConfig(funnel=funnel), "gallery")
    finally:
        store.close()
    # Milvus funnels the targets only (caption, full); the local engine also funnels the other
    # prefixes its store serves, where a direct search would scan the store
    targets = {bundle.contract[g] for g in funnel.targets}
    assert remote.choices == {n: c for n, c in local.choices.items() if n in targets}
    assert remote.choices
    assert len(CountingScorer.calls) > 3 and max(CountingScorer.calls) <= CALIBRATION_CHUNK
    # no request waits on the calibration: its calls get the longer deadline, not the store's
    assert set(CountingScorer.deadlines) == {CALIBRATION_DEADLINE_S}


def test_an_auto_funnel_serves_on_milvus_as_locally(
    milvus_engine: SearchEngine, engine: SearchEngine
) -> None:
    """Where the calibration chose a funnel, an AUTO search on Milvus runs it (its plan says
    so) and finds the local engine's hits."""
    funnel = FunnelConfig(min_rows=100, queries=3 * CALIBRATION_CHUNK, max_cost_share=1.0)
    remote = configured(milvus_engine, EngineConfig(funnel=funnel))
    local = configured(engine, EngineConfig(funnel=funnel))
    length = min(remote.scorer.choices)  # type: ignore[attr-defined]
    [granularity] = [g for g, n in remote.bundle.contract.items() if n == length]
    query = SearchQuery.of("a dog runs on the beach", granularity=granularity.value, k=10)
    found, wanted = remote.search(query), local.search(query)
    assert found.plan.kind == "funnel" and found.plan.shortlist_rows > 0
    assert [h.row for h in found.hits] == [h.row for h in wanted.hits]


def test_closing_a_lite_files_store_stops_its_engine(tmp_path: Path) -> None:
    """A `.db` target's engine runs in this process and belongs to its store. Closed, the
    store stops it: the folder opens again (Milvus Lite's lock refuses a second engine while
    one runs), and its address answers no more. An engine left running to the interpreter's
    exit printed a thread's traceback when a call whose deadline had passed reached it."""
    target = str(tmp_path / "rows.db")
    first = MilvusStore(target, timeout_s=10)
    with pytest.raises(EngineUnavailable, match=r"rows\.db unavailable"):
        MilvusStore(target, timeout_s=10)
    first.close()
    second = MilvusStore(target, timeout_s=10)
    try:
        assert second.versions("any") == []
    finally:
        second.close()
    channel = grpc.insecure_channel(first.uri.removeprefix("http://"))
    with pytest.raises(grpc.FutureTimeoutError):
        grpc.channel_ready_future(channel).result(timeout=1)
    channel.close()
    with pytest.raises(EngineUnavailable, match=r"no .*nowhere"):
        MilvusStore(str(tmp_path / "nowhere" / "rows.db"))


def test_a_lite_file_gets_a_longer_engine_deadline_than_a_server() -> None:
    """A Milvus Lite file evaluates filters in Python (seconds a request): its default deadline
    is the longer."""
    lite, server = Backend.parse("./rows.db"), Backend.parse("milvus://h:19530")
    assert engine_deadline(lite) == LITE_DEADLINE_S > engine_deadline(server)
    assert engine_deadline(server) == SERVER_DEADLINE_S


def test_an_exports_calls_over_every_row_get_the_deadline_per_100k_rows() -> None:
    """Flushing, building the indexes and loading work on every row: a 1M-row collection's
    index build on Milvus Lite passed a flat 60 s."""
    assert bulk_deadline(60.0, 5_000) == 60.0  # never below a call's own
    assert bulk_deadline(60.0, 1_000_000) == 600.0


def test_a_release_before_2_4_is_refused_for_its_one_vector_field() -> None:
    """A version is one collection with a vector field per prefix; Milvus 2.3 (the pip
    package `milvus`, "v2.3.5-lite") holds one and refused the export halfway, at the
    collection, with "multiple vector fields is not supported"."""
    assert not holds_vector_fields("v2.3.5-lite", 5)
    assert not holds_vector_fields("v2.3.5", 2)
    assert holds_vector_fields("v2.3.5", 1)
    assert holds_vector_fields("v2.4.0", 5) and holds_vector_fields("v2.6.1", 5)
    assert holds_vector_fields("milvus_lite-3.2.2", 5)  # Milvus Lite: many fields


def test_alias_switch_under_load_fails_no_request(
    lite: LiteServer, bundles: Path, exported: str, minilm
) -> None:
    # an alias of this test's own: switching and dropping its versions leaves the module's
    # "gallery" (which the other tests search, in any order) as it was
    store = MilvusStore(lite.uri, timeout_s=10)
    first = export_bundle(
        Bundle.open_version(bundles / read_current(bundles)), store, "swap", rows_per_batch=128
    )
    assert first.published and first.collection == collection_name("swap", 1)
    swapping = open_milvus(lite.uri, bundles, "swap", encoder=minilm, timeout_s=5)
    config = ServerConfig(port=0, batching=BatchingConfig(max_batch=16, max_wait_ms=2))
    with BackgroundServer(swapping, config) as running:
        follower = AliasFollower(running.server, poll_s=0.1).start()
        try:
            with Searching(running.target, threads=2) as load:
                wait_for(lambda: load.requests >= 10, 60, "searches before the switch")
                summary = export_bundle(
                    Bundle.open_version(bundles / version_name(2)),
                    store,
                    "swap",
                    grace_s=3600,
                )
                assert summary.previous == collection_name("swap", 1)
                wait_for(lambda: follower.swaps == 1, 30, "the follower's swap")
                before = load.requests
                wait_for(lambda: load.requests >= before + 10, 60, "searches after the switch")
                # within the grace period the old version stays; past it, it is dropped
                assert store.drop_retired("swap", grace_s=3600) == []
                assert store.drop_retired("swap", grace_s=0) == [summary.previous]
                after = load.requests
                wait_for(lambda: load.requests >= after + 10, 60, "searches after the drop")
        finally:
            follower.close()
    assert load.failures == []
    assert all(v == sorted(v) for v in load.versions)  # 1 … 1, 2 … 2 in every thread
    assert {v for thread in load.versions for v in thread} == {1, 2}
    assert store.versions("swap") == [collection_name("swap", 2)]
    assert store.current("gallery") == exported  # the shared alias is untouched
    store.close()


def test_engine_down_is_unavailable_then_resumes(
    lite: LiteServer, bundles: Path, exported: str, minilm
) -> None:
    engine = open_milvus(lite.uri, bundles, "gallery", encoder=minilm, timeout_s=2)
    with (
        BackgroundServer(engine, ServerConfig(port=0)) as running,
        StrataClient(running.target, timeout=30) as client,
    ):
        assert len(client.search("a dog", k=5).hits) == 5
        lite.stop()
        try:
            with pytest.raises(StrataClientError) as failed:
                client.search("a dog", k=5)  # not DEADLINE_EXCEEDED: the call did not hang
            assert failed.value.code == grpc.StatusCode.UNAVAILABLE
            assert "vector engine" in str(failed.value) and str(lite.port) in str(failed.value)
            with pytest.raises(UnavailableError):
                engine.explain(SearchQuery.of("a dog"), row=0)
        finally:
            lite.start()
        wait_for(lambda: answers(client), WAIT_S, "the engine's return")
        assert len(client.search("a dog", k=5).hits) == 5


def answers(client: StrataClient) -> bool:
    """Whether a search is answered now."""
    try:
        client.search("a dog", k=5)
    except StrataClientError:
        return False
    return True


@pytest.mark.slow
def test_export_and_serve_from_the_command_line(
    strata, serve_process, bundles: Path, engine: SearchEngine, tmp_path: Path
) -> None:
    target = str(tmp_path / "gallery.db")
    bad = strata("index", "export", "--bundles", str(bundles), "--to", "nowhere")
    assert bad.returncode == 2 and bad.stderr.startswith("strata: error: not a Milvus target")
    assert "Traceback" not in bad.stderr
    # an engine error (every call's deadline passed) is one line: no pymilvus log, no traceback
    late = strata("index", "export", "--bundles", str(bundles), "--to", target, "--timeout", "1e-3")
    assert late.returncode == 2 and late.stdout == "", late.stdout
    assert late.stderr.startswith("strata: error: vector engine") and late.stderr.count("\n") == 1
    done = strata(
        "index", "export", "--bundles", str(bundles), "--to", target, "--name", "cli", check=True
    )
    assert "published    alias cli → cli__v000001" in done.stdout
    process = serve_process(
        *("--bundles", str(bundles), "--port", "0", "--device", "cpu"),
        *("--backend", target, "--collection", "cli"),
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("serving "), line + (
            process.stderr.read() if process.poll() is not None else ""
        )
        address = line.split(" on ")[-1].split(";")[0]
        # the start-up lines come before any call is answered; read them here (a readline's
        # buffer may already hold them, and communicate() below would not see what it holds)
        started: list[str] = []
        while len(started) < 10:
            started.append(process.stdout.readline())
            if started[-1].startswith("backend:") or not started[-1]:
                break
        with StrataClient(address) as client:
            found = client.search("a red car", k=10, granularity="caption")
        local = engine.search(SearchQuery.of("a red car", k=10, granularity="caption"))
        assert found.ids == local.ids
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert f"backend: {target}, following alias cli\n" in started + out.splitlines(True)


def test_a_row_with_more_concepts_than_k_exports_and_serves(
    lite: LiteServer, many_words_bundle: Path, minilm
) -> None:
    """Once refused (ARRAY field 'concepts' has 49 elements, exceeds max_capacity=8): the
    arrays are sized from the bundle's fullest row, its k axes and its word concepts."""
    bundle = Bundle.open(many_words_bundle)
    indptr, _, _ = row_concepts_csr(bundle)
    most = int(np.diff(indptr).max())
    assert most == bundle.manifest.k + 1 + MANY_WORDS  # row 0: every word and its k axes
    store = MilvusStore(lite.uri, timeout_s=30)
    summary = export_bundle(bundle, store, "many", rows_per_batch=128)
    fields = store.client.describe_collection(summary.collection)["fields"]
    assert {f["name"]: f["params"].get("max_capacity") for f in fields}["concepts"] == most
    store.close()
    local = SearchEngine(Bundle.open(many_words_bundle), minilm)
    remote = open_milvus(lite.uri, many_words_bundle, "many", encoder=minilm, timeout_s=5)
    last = beacon_words(MANY_WORDS)[-1]
    for query in (
        SearchQuery.of("a dog on the beach", k=10, require=[BEACON, last]),
        SearchQuery.of("a dog on the beach", k=10, exclude=[last], explain=True),
        SearchQuery.of("a cat", k=5, require=[last], exclude=[BEACON]),
    ):
        ours, theirs = remote.search(query), local.search(query)
        assert ours.filtered_rows == theirs.filtered_rows and ours.ids == theirs.ids, query
        for a, b in zip(ours.hits, theirs.hits, strict=True):
            assert [c.id for c in a.concepts] == [c.id for c in b.concepts]
            assert [c.id for c in a.shared_concepts] == [c.id for c in b.shared_concepts]
    ours, theirs = (e.explain(SearchQuery.of("a cat"), row=0) for e in (remote, local))
    words = [c for c in ours.item_concepts if c.id >= remote.coder.axis_concepts]
    assert len(words) == 1 + MANY_WORDS and ours.item_concepts[: len(words)] == words  # first
    assert [(c.id, round(c.activation, 3)) for c in ours.item_concepts] == [
        (c.id, round(c.activation, 3)) for c in theirs.item_concepts
    ]


def test_an_interrupted_export_leaves_nothing_and_moves_no_alias(
    lite: LiteServer, bundles: Path, exported: str
) -> None:
    store = MilvusStore(lite.uri, timeout_s=10)
    before = store.versions("gallery")

    def interrupted(done: int) -> None:
        raise KeyboardInterrupt  # Ctrl-C after the first insert

    version2 = Bundle.open_version(bundles / version_name(2))
    with pytest.raises(KeyboardInterrupt):
        export_bundle(version2, store, "gallery", rows_per_batch=100, progress=interrupted)
    assert store.current("gallery") == exported
    assert store.versions("gallery") == before  # the partial collection was dropped
    with pytest.raises(ExportError, match="already published as gallery"):
        export_bundle(Bundle.open_version(bundles / read_current(bundles)), store, "gallery")
    store.close()
