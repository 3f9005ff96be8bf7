"""The funnel plan over a real MiniLM bundle: exact when the shortlist covers the gallery, the
rerank's p_L of stored rows, the calibrated default, the concept filter, deletions, the API."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
from search_gallery import LANTERN

from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.format.bundle import Bundle
from indexer.format.funnel import ExactRows, FunnelChoice, calibrate, exact_rows_for
from indexer.format.funnel_plans import (
    FunnelConfig,
    FunnelPlans,
    calibrate_plans,
    plans_record,
    recorded_plans,
)
from indexer.update.rows import DeleteConfig, delete_rows
from service.cli.search import format_result
from service.engine.filtering import allowed_rows
from service.engine.plans import Planner, requested_funnel
from service.engine.search import EngineConfig, SearchEngine
from service.errors import QueryError
from service.results import ConceptRef, SearchPlan, SearchQuery
from training.core.granularity import Granularity
from training.core.metrics import neighbour_recall

TEXTS = ("a dog chasing a ball", "a red car on the street", "a woman in a blue dress")


def vectors(minilm, texts=TEXTS) -> np.ndarray:
    return minilm.encode_text(list(texts))


def hits(engine: SearchEngine, vector, **options) -> tuple[list[int], list[float]]:
    result = engine.search(SearchQuery.of(vector=vector, **options))
    return [h.row for h in result.hits], [h.score for h in result.hits]


@pytest.fixture(scope="module")
def funnel_engine(text_bundle: Path, minilm) -> SearchEngine:
    """The session's bundle with the auto funnel calibrated however small the bundle is."""
    config = EngineConfig(funnel=FunnelConfig(min_rows=1))
    return SearchEngine(Bundle.open(text_bundle), minilm, config)


@pytest.mark.parametrize("granularity", ["full", "caption", "relation"])
def test_a_shortlist_of_the_whole_gallery_reranks_to_the_exact_search(engine, minilm, granularity):
    factor = -(-engine.bundle.rows // 10)  # k·F ≥ N: every row is shortlisted
    for vector in vectors(minilm):
        direct = hits(engine, vector, granularity=granularity, plan="direct")
        plan = SearchPlan("funnel", engine.contract[Granularity.OBJECT], factor)
        funnel = hits(engine, vector, granularity=granularity, plan=plan)
        assert funnel[0] == direct[0]
        np.testing.assert_allclose(funnel[1], direct[1], atol=1e-6)


def test_the_rerank_takes_p_l_of_the_stored_full_rows(engine):
    full = ExactRows.of(engine.bundle.index(engine.bundle.dim), engine.bundle.dim)
    rows = np.arange(0, engine.bundle.rows, 7)
    stored = engine.bundle.index(96).reconstruct_batch(rows)
    np.testing.assert_allclose(full.prefix_rows(rows, 96), stored, atol=1e-6)
    assert exact_rows_for({96: engine.bundle.index(96), 384: full.index}, 96).length == 96


def test_a_short_shortlist_is_a_real_approximation(engine, minilm):
    """F = 1 at D/16 shortlists k rows only: the rerank cannot repair them all (the test
    would pass vacuously if the plan ignored its factor)."""
    found, exact = [], []
    for vector in vectors(minilm):
        plan = SearchPlan("funnel", engine.contract[Granularity.OBJECT], 1)
        found.append(hits(engine, vector, granularity="full", k=10, plan=plan)[0])
        exact.append(hits(engine, vector, granularity="full", k=10, plan="direct")[0])
    assert neighbour_recall(np.array(found), np.array(exact)) < 1.0


def test_auto_funnels_where_calibrated_and_keeps_the_recall(funnel_engine, engine, minilm):
    choice = funnel_engine.scorer.planner.choices[funnel_engine.contract[Granularity.FULL]]
    assert choice.recall >= 0.99 and choice.cost_share <= 0.5
    found, exact = [], []
    for vector in vectors(minilm):
        result = funnel_engine.search(SearchQuery.of(vector=vector, k=10))
        assert result.plan.kind == "funnel" and result.plan.reason.startswith("auto: recall@10")
        assert result.plan.shortlist_prefix == choice.shortlist_prefix
        assert result.plan.shortlist_rows == 10 * choice.factor
        found.append([h.row for h in result.hits])
        exact.append(hits(engine, vector, k=10, plan="direct")[0])
    assert neighbour_recall(np.array(found), np.array(exact)) >= 0.9
    plain = engine.search(SearchQuery.of(vector=vectors(minilm)[0]))
    assert plain.plan.kind == "direct" and "rows <" in plain.plan.reason  # below min_rows
    relation = funnel_engine.search(
        SearchQuery.of(vector=vectors(minilm)[0], granularity="relation")
    )
    assert relation.plan.kind == "direct"


def test_a_min_recall_above_the_calibrated_recall_searches_directly(funnel_engine, minilm):
    choice = funnel_engine.scorer.planner.choices[funnel_engine.contract[Granularity.FULL]]
    vector = vectors(minilm)[0]
    kept = funnel_engine.search(SearchQuery.of(vector=vector, min_recall=choice.recall))
    assert kept.plan.kind == "funnel"
    asked = min(1.0, choice.recall + 1e-3)
    above = funnel_engine.search(SearchQuery.of(vector=vector, min_recall=asked))
    assert above.plan.kind == "direct" and "min_recall" in above.plan.reason


def test_calibration_refuses_a_funnel_that_does_not_pay(engine):
    full = engine.bundle.dim
    indexes = {n: engine.bundle.index(n) for n in engine.bundle.prefix_lengths}
    exact = exact_rows_for(indexes, full)
    assert calibrate(indexes, exact, full, max_cost_share=0.01) is None


@pytest.mark.parametrize("exact_max", [0, 4096])
@pytest.mark.parametrize("kind", ["require", "exclude"])
def test_filtered_funnel_hits_are_allowed_and_exact(text_bundle, minilm, exact_max, kind):
    engine = SearchEngine(Bundle.open(text_bundle), minilm, EngineConfig(exact_max=exact_max))
    refs = {kind: [LANTERN]}  # a named concept active in some rows, whatever the model
    allowed = allowed_rows(
        engine.bundle,
        [ConceptRef(name=LANTERN)] if kind == "require" else [],
        [ConceptRef(name=LANTERN)] if kind == "exclude" else [],
    )
    assert 0 < allowed.count < engine.bundle.rows
    factor = -(-engine.bundle.rows // 10)
    for vector in vectors(minilm):
        plan = SearchPlan("funnel", 48, factor)
        result = engine.search(SearchQuery.of(vector=vector, k=10, plan=plan, **refs))
        rows = np.array([h.row for h in result.hits])
        assert result.plan.kind == "funnel" and result.filtered_rows == allowed.count
        assert len(rows) == min(10, allowed.count) and allowed.contains(rows).all()
        direct = engine.search(SearchQuery.of(vector=vector, k=10, plan="direct", **refs))
        assert rows.tolist() == [h.row for h in direct.hits]
        short = engine.search(
            SearchQuery.of(vector=vector, k=10, plan=SearchPlan(factor=2), **refs)
        )
        assert allowed.contains(np.array([h.row for h in short.hits])).all()


def test_deleted_rows_never_come_back_through_the_funnel(text_bundle, minilm, tmp_path):
    bundles = tmp_path / "bundles"
    shutil.copytree(text_bundle, bundles)
    before = SearchEngine(Bundle.open(bundles), minilm)
    query = vectors(minilm)[0]
    top = before.search(SearchQuery.of(vector=query, k=20, plan="direct"))
    deleted = [h.id for h in top.hits[::2]]  # every other hit of the query itself
    delete_rows(DeleteConfig(bundles=bundles, ids=tuple(deleted), keep=2, verify_sample=8))
    after = SearchEngine(Bundle.open(bundles), minilm)
    assert after.bundle.rows == before.bundle.rows - len(deleted)
    for factor in (2, -(-after.bundle.rows // 10)):
        plan = SearchPlan("funnel", 24, factor)
        result = after.search(SearchQuery.of(vector=query, k=10, plan=plan))
        assert not set(result.ids) & set(deleted) and len(result.ids) == 10
    # with the whole gallery shortlisted: the exact top 10 of the rows left
    kept = [h.id for h in top.hits if h.id not in deleted]
    assert result.ids[: len(kept)] == kept


@pytest.mark.parametrize(
    ("plan", "k", "message"),
    [
        (SearchPlan("funnel", 25), 10, r"shortlist prefix 25 is not a prefix of the bundle"),
        (SearchPlan("funnel", 384), 10, r"below the target 384; choose from 24, 48, 96, 192"),
        (SearchPlan("funnel", 0, 5000), 10, r"factor must lie in \[1, 1000\]"),
        (SearchPlan("funnel", 0, 1000), 101, r"101 × 1000 rows; at most 100000"),
        (SearchPlan("direct", 24), 10, r"a direct plan takes no shortlist"),
        (SearchPlan("fast"), 10, r"unknown search plan 'fast'"),
    ],
)
def test_a_plan_the_bundle_cannot_run_is_refused_naming_it(engine, minilm, plan, k, message):
    with pytest.raises(QueryError, match=message):
        engine.search(SearchQuery.of(vector=vectors(minilm)[0], k=k, plan=plan, granularity="full"))


def test_a_requested_funnel_takes_what_it_names_then_the_calibrated_choice_then_defaults():
    """Both engines' rule (the local planner and the Milvus scorer), on its own."""
    choice = FunnelChoice(shortlist_prefix=48, factor=7, recall=0.99, queries=50, cost_share=0.3)
    prefixes, default = (24, 48, 96, 192, 384), 4

    def requested(plan: SearchPlan, found: FunnelChoice | None = choice) -> tuple[int, int]:
        query = SearchQuery.of(vector=np.ones(384, np.float32), plan=plan)
        return requested_funnel(query, 384, prefixes, found, default)

    assert requested(SearchPlan("funnel")) == (48, 7)  # the calibrated funnel at the target
    assert requested(SearchPlan("funnel", 0, 3)) == (48, 3)  # its factor asked for
    assert requested(SearchPlan("funnel", 96)) == (96, default)  # another shortlist: no factor
    assert requested(SearchPlan("funnel", 48)) == (48, 7)
    assert requested(SearchPlan("funnel"), None) == (24, default)  # uncalibrated: the shortest
    with pytest.raises(QueryError, match="shortlist prefix 384 is not a prefix of the bundle"):
        requested(SearchPlan("funnel", 384))
    with pytest.raises(QueryError, match="no funnel at prefix 24: the contract has no shorter"):
        requested_funnel(SearchQuery.of(vector=np.ones(24, np.float32)), 24, prefixes, None, 4)


def test_a_funnel_needs_exact_rows_at_the_target(engine, minilm):
    engine.scorer.planner.inputs.exact_by_target[engine.contract[Granularity.FULL]] = (
        None  # as for IVF-PQ with lists on disk
    )
    try:
        with pytest.raises(QueryError, match=r"keeps no exact rows at prefix ≥ 384"):
            engine.search(SearchQuery.of(vector=vectors(minilm)[0], plan="funnel"))
    finally:
        del engine.scorer.planner.inputs.exact_by_target[engine.contract[Granularity.FULL]]


def test_the_plan_goes_through_grpc_and_the_cli_shows_it(client, engine, minilm):
    vector = vectors(minilm)[0]
    result = client.search(vector=vector, k=5, plan=SearchPlan("funnel", 48, 4))
    assert result.plan.kind == "funnel" and result.plan.reason == "requested"
    assert (result.plan.shortlist_prefix, result.plan.factor, result.plan.shortlist_rows) == (
        48,
        4,
        20,
    )
    local = engine.search(SearchQuery.of(vector=vector, k=5, plan=SearchPlan("funnel", 48, 4)))
    assert result.ids == local.ids
    shown = format_result(result, [], explain=False)
    assert "plan         funnel: 20 rows at prefix 48, reranked exactly at 384 (requested)" in shown
    direct = client.search(vector=vector, k=5, plan="direct")
    assert direct.plan.kind == "direct" and direct.plan.reason == "requested"


@pytest.mark.parametrize(
    ("factory", "reranks"),
    [("HNSW32,Flat", True), ("IVF16,PQ16x8np,RFlat", True), ("ivfpq-ondisk", False)],
)
def test_the_rerank_reads_exact_rows_of_any_index_that_keeps_them(
    text_bundle, minilm, tmp_path, factory, reranks
):
    """The full prefix as HNSW (its flat storage), IVF-PQ with a refine (its Flat) or IVF-PQ
    on disk (no exact rows), in the layout of a file per prefix: the funnel reranks from the
    first two, exactly as Flat would."""
    root = text_bundle.parent

    def built(out: Path, *index_types: str) -> Bundle:
        build_bundle(
            BuildConfig(
                cache=root / "cache",
                grasp=root / "grasp",
                cedar=root / "cedar",
                out=out,
                index_types=index_types,
                store="none",
                progress=False,
            )
        )
        return Bundle.open(out)

    other = SearchEngine(built(tmp_path / "bundles", f"full={factory}"), minilm)
    flat = SearchEngine(built(tmp_path / "flat"), minilm)
    factor = -(-other.bundle.rows // 10)
    plan = SearchPlan("funnel", 48, factor)
    for vector in vectors(minilm):
        query = SearchQuery.of(vector=vector, granularity="full", plan=plan)
        if not reranks:
            with pytest.raises(QueryError, match="keeps no exact rows"):
                other.search(query)
            continue
        found, expected = other.search(query), flat.search(query)
        assert found.ids == expected.ids
        np.testing.assert_allclose(
            [h.score for h in found.hits], [h.score for h in expected.hits], atol=1e-6
        )


def test_a_version_plans_its_funnels_at_build_time(engine):
    """The text bundle records the plans calibrated under the default FunnelConfig, and an
    engine so configured takes them without calibrating; the record reads back as calibrated."""
    bundle = engine.bundle
    assert bundle.manifest.funnels is not None
    default = FunnelConfig()
    planner = Planner(bundle, default)
    fresh = calibrate_plans(bundle, default)
    assert planner.recorded
    assert (planner.choices, planner.direct_reasons) == (fresh.choices, fresh.direct_reasons)
    assert f"{bundle.rows} rows < {default.min_rows}" in planner.direct_reasons[bundle.dim]


def test_another_funnel_config_calibrates_when_the_engine_loads(engine):
    """A config the version recorded no plans under calibrates at load (here one that funnels
    the 300-row bundle); its plans, recorded, read back equal."""
    config = FunnelConfig(min_rows=100, max_cost_share=1.0)
    planner = Planner(engine.bundle, config)
    assert not planner.recorded and planner.choices  # the premise: a funnel that pays
    record = plans_record(FunnelPlans(planner.choices, planner.direct_reasons), config, 0.0)
    manifest = dataclasses.replace(engine.bundle.manifest, funnels=record)
    assert recorded_plans(manifest, config) == FunnelPlans(planner.choices, planner.direct_reasons)
    assert recorded_plans(manifest, FunnelConfig()) is None
