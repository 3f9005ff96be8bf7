"""The main job, end to end on a small compositional set: embed, train both transforms, build
and publish the bundle, serve it, search at every granularity; a rerun reuses every stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.format.bundle import Bundle
from indexer.verify.check import verify_bundle
from service.cli.demo import DEMO_SEARCHES, DemoConfig, demo_corpus, plan_demo, run_demo
from service.cli.demo_command import format_demo, format_plan
from training.core.settings import StrataSettings

SMALL = DemoConfig(scenes=300, grasp_epochs=2, cedar_epochs=2, k=5, progress=False)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("demo")
    settings = StrataSettings(data_dir=root / "no-data", runs_dir=root / "runs", device="cpu")
    return settings, run_demo(settings, SMALL)


def test_demo_falls_back_to_the_compositional_set_and_builds_every_stage(demo_run):
    settings, result = demo_run
    assert result.corpus == "compositional" and result.summary.rows == 300
    assert list(result.stages) == ["embed", "grasp-vl", "cedar", "index", "search"]
    assert all(result.stages[s].startswith("built in") for s in ["embed", "grasp-vl", "cedar"])
    assert result.stages["search"].startswith("served in")
    bundle = Bundle.open(settings.runs_dir / "demo" / "bundles-compositional")
    assert bundle.path == result.bundle and bundle.rows == 300
    assert bundle.manifest.encoder == "minilm"
    assert verify_bundle(bundle.path).ok


def test_demo_searches_at_each_granularity_with_explanations(demo_run):
    _, result = demo_run
    by_label = {s.search.label: s for s in result.searches}
    assert list(by_label) == [s.label for s in DEMO_SEARCHES["compositional"]]
    expected = {"object": 24, "attribute": 48, "relation": 96, "caption": 192, "full": 384}
    for label, prefix in expected.items():
        searched = by_label[label].result
        assert searched.granularity.value == label and searched.prefix_length == prefix
        assert len(searched.hits) == SMALL.k
        assert searched.query_concepts, "explain returns the query's active concepts"
        assert all(hit.metadata["caption"] for hit in searched.hits)
    assert "dog" in by_label["object"].result.hits[0].metadata["caption"]
    auto = by_label["auto"].result
    assert auto.granularity.value == "attribute" and "white" in auto.routing_reason
    why = result.explanation
    assert why is not None and why.item_id == by_label["caption"].result.hits[0].id
    assert [s.prefix_length for s in why.similarities] == [24, 48, 96, 192, 384]


def test_demo_concept_filter_excludes_rows_with_the_concept(demo_run):
    _, result = demo_run
    filtered = next(s for s in result.searches if s.search.label == "concept filter")
    names = {e.name for e in Bundle.open(result.bundle).coder.catalog if e.named}
    # the demo runs the filter exactly when its trained catalog names a concept "beach", and
    # says so when it does not (then the search runs unfiltered): both hold for any model
    assert (filtered.skipped is None) == ("beach" in names)
    if filtered.skipped:
        assert "beach" in filtered.skipped and filtered.result.filtered_rows is None
        return
    assert 0 < filtered.result.filtered_rows < 300
    for hit in filtered.result.hits:
        assert "beach" not in {c.name for c in hit.concepts}


def test_demo_report_prints_every_search(demo_run):
    _, result = demo_run
    report = format_demo(result)
    for search in DEMO_SEARCHES["compositional"]:
        assert f"=== {search.label}: {search.text!r}" in report
    assert "cosine by prefix: object (24)" in report


def test_demo_rerun_reuses_every_stage(demo_run):
    settings, first = demo_run
    again = run_demo(settings, SMALL)
    assert again.summary.already_complete
    reused = {s: what for s, what in again.stages.items() if s not in ("embed", "search")}
    assert reused == {
        "grasp-vl": "reused",
        "cedar": "reused",
        "index": "reused",
    }
    assert again.bundle == first.bundle
    assert [h.id for h in again.searches[0].result.hits] == [
        h.id for h in first.searches[0].result.hits
    ]


def test_demo_prefers_flickr8k_when_its_captions_are_there(tmp_path: Path):
    flickr = tmp_path / "data" / "flickr8k"
    flickr.mkdir(parents=True)
    (flickr / "Flickr8k.token.txt").write_text("a.jpg#0\tA dog runs .\n")
    settings = StrataSettings(data_dir=tmp_path / "data", runs_dir=tmp_path / "runs")
    assert demo_corpus(settings, 100)[0] == "flickr8k"
    assert demo_corpus(StrataSettings(data_dir=tmp_path / "none"), 100)[0] == "compositional"


def test_demo_first_screen_estimates_each_stage_and_names_the_reused_ones(demo_run, tmp_path: Path):
    settings, _ = demo_run
    fresh = StrataSettings(data_dir=tmp_path / "no-data", runs_dir=tmp_path / "runs")
    ahead = plan_demo(fresh, SMALL)
    assert ahead.corpus == "compositional" and ahead.rows == SMALL.scenes
    assert list(ahead.stages) == ["embed", "grasp-vl", "cedar", "index", "search"]
    assert all(seconds is not None and seconds > 0 for seconds in ahead.stages.values())
    assert ahead.seconds == pytest.approx(sum(ahead.stages.values()))
    done = plan_demo(settings, SMALL)
    assert [s for s, seconds in done.stages.items() if seconds is None] == [
        "embed", "grasp-vl", "cedar", "index"
    ]  # fmt: skip
    screen = format_plan(done)
    assert screen.count("reused") == 4 and "search" in screen and "total" in screen
