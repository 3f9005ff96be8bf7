"""Search parameters tuned at build time to a recall target (indexer/format/tuning.py): the
mathematics, the build's records, `strata index info`, old manifests, and re-tuning on add and
delete."""

from __future__ import annotations

import json
import re
from pathlib import Path

import faiss
import numpy as np
import pytest
from bundle_inputs import Inputs, Parts

from indexer.format.bundle import Bundle
from indexer.format.manifest import MANIFEST, read_manifest
from indexer.format.prefixes import rotate_rows
from indexer.format.tuning import (
    OperatingPoint,
    choose,
    drop_self,
    exact_neighbours,
    held_out_rows,
    pareto_front,
    tune_index,
)
from indexer.update.rows import AddConfig, DeleteConfig, add_rows, delete_rows
from indexer.verify.check import verify_bundle
from training.core.metrics import neighbour_recall, prefix_vectors

TYPES = ("object=hnsw", "relation=ivfpq-refine", "caption=ivfpq-ondisk", "full=IVF{nlist},Flat")


def point(search: str, recall: float, ms: float, low: float | None = None) -> OperatingPoint:
    return OperatingPoint(search, recall, ms, recall if low is None else low)


def test_the_front_keeps_only_points_nothing_beats_on_both_axes():
    points = [point("a", 0.80, 1.0), point("b", 0.90, 0.9), point("c", 0.95, 2.0)]
    points += [point("d", 0.93, 3.0), point("e", 0.99, 4.0)]
    assert [p.search for p in pareto_front(points)] == ["b", "c", "e"]


def test_the_choice_is_the_fastest_point_whose_lower_bound_reaches_the_target():
    front = [point("a", 0.96, 1.0, low=0.94), point("b", 0.97, 2.0, low=0.955), point("c", 1, 3)]
    assert choose(front, 0.95) == (front[1], "tuned")
    assert choose(front, 0.999) == (front[2], "tuned")
    assert choose(front[:2], 0.99) == (front[1], "below target")


def test_a_query_row_is_dropped_from_its_own_answer():
    found = np.array([[5, 1, 2, 3], [0, 9, 8, 7], [4, 5, 6, -1]])
    np.testing.assert_array_equal(
        drop_self(found, np.array([5, 8, 1]), 3), [[1, 2, 3], [0, 9, 7], [4, 5, 6]]
    )


def test_blockwise_exact_neighbours_are_the_brute_force_ones(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("indexer.format.tuning.EXACT_BLOCK", 97)  # many blocks, a ragged last one
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(1000, 16)).astype(np.float32)
    queries = rng.normal(size=(20, 16)).astype(np.float32)
    found = exact_neighbours(lambda a, b: rows[a:b], len(rows), queries, 7)
    np.testing.assert_array_equal(found, np.argsort(-(queries @ rows.T), axis=1)[:, :7])


def recall_at(bundle: Bundle, x: np.ndarray, length: int, queries: np.ndarray) -> float:
    """Leave-one-out recall@10 of the bundle's own search at a prefix, on these rows."""
    z = prefix_vectors(rotate_rows(x, bundle.grasp), length)
    scores = z[queries] @ z.T
    scores[np.arange(len(queries)), queries] = -np.inf
    exact = np.argsort(-scores, axis=1)[:, :10]
    _, found = bundle.search_prefix(length, bundle.rotate(x[queries]), 11)
    return neighbour_recall(drop_self(found, queries, 10), exact)


def test_a_build_tunes_each_approximate_index_and_records_its_operating_points(
    clustered: Inputs, tmp_path: Path
):
    summary = clustered.build(tmp_path / "bundles", index_types=TYPES, recall_target=0.97)
    bundle = Bundle.open(tmp_path / "bundles")
    entries = {p.length: p for p in bundle.manifest.prefixes}
    assert entries[8].tuning is None  # Flat: exact
    for length in (4, 16):  # HNSW, IVF-PQ with a rerank: exact vectors in their storage
        tuning = entries[length].tuning
        assert tuning is not None and tuning.status == "tuned", tuning
        assert tuning.target == 0.97 and tuning.k == 10 and tuning.queries == 256
        assert entries[length].search == tuning.chosen
        chosen = next(p for p in tuning.points if p.search == tuning.chosen)
        assert chosen.recall_low >= 0.97 and chosen.recall == tuning.recall
        faster = [p for p in tuning.points if p.latency_ms < chosen.latency_ms]
        assert all(p.recall_low < 0.97 for p in faster)  # the cheapest that reaches it
        recalls = [p.recall for p in tuning.points]
        assert recalls == sorted(recalls) and len(set(recalls)) == len(recalls)  # a front
    # other held-out rows than the tuning's: the tuned setting reaches the target there too
    x = clustered.embeddings()
    others = np.setdiff1d(np.arange(0, 3000, 7), held_out_rows(3000, 256, 0))[:200]
    for length in (4, 16):
        assert recall_at(bundle, x, length, others) >= 0.95
    for length in (32, 64):  # no exact vectors here or at any longer prefix: not tuned
        assert entries[length].tuning.status == "untuned"
        assert "no exact vectors" in entries[length].tuning.note
        assert entries[length].search.startswith("nprobe=")  # the default kept
    assert bundle.manifest.build["recall_target"] == 0.97
    assert 0 < bundle.manifest.build["tuning_seconds"] < summary.seconds


def test_a_higher_target_buys_more_search_and_more_recall(clustered: Inputs, tmp_path: Path):
    tunings = {}
    for target in (0.5, 0.999):
        out = tmp_path / str(target)
        clustered.build(out, index_types=("relation=ivfpq-refine",), recall_target=target)
        tunings[target] = Bundle.open(out).manifest.prefix(16).tuning
    low, high = tunings[0.5], tunings[0.999]
    assert low.recall < high.recall, (low, high)
    assert low.chosen != high.chosen


def test_an_unreachable_target_keeps_the_most_accurate_setting_and_says_so():
    rng = np.random.default_rng(1)
    rows = rng.normal(size=(2000, 16)).astype(np.float32)
    index = faiss.index_factory(16, "IVF32,PQ2x4np", faiss.METRIC_INNER_PRODUCT)
    index.train(rows)
    index.add(rows)
    tuning = tune_index(index, lambda a, b: rows[a:b], target=0.999, queries=64)
    assert tuning.status == "below target"
    assert tuning.recall == max(p.recall for p in tuning.points) < 0.999


def test_index_info_shows_recall_and_latency_per_index(strata_main, clustered: Inputs, tmp_path):
    out = tmp_path / "bundles"
    clustered.build(out, index_types=TYPES)
    run = strata_main("index", "info", str(out))
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    hnsw = lines[lines.index(next(x for x in lines if "HNSW32,Flat" in x)) + 1]
    assert re.search(r"search efSearch=\d+: recall@10 [01]\.\d{3} \(target 0\.95, tuned\)", hnsw)
    assert re.search(r"\d\.\d{3} ms/query; tuned on 256 held-out rows", hnsw), hnsw
    assert "exact search (recall 1)" in run.stdout
    assert "not tuned: the bundle keeps no exact vectors" in run.stdout


def test_a_manifest_from_before_tuning_still_loads(clustered: Inputs, tmp_path: Path):
    out = tmp_path / "bundles"
    clustered.build(out, index_types=("object=hnsw",))
    path = Bundle.open(out).path
    data = json.loads((path / MANIFEST).read_text())
    for entry in data["prefixes"]:
        entry.pop("tuning")
    (path / MANIFEST).write_text(json.dumps(data))
    manifest = read_manifest(path)
    assert all(p.tuning is None for p in manifest.prefixes)
    assert Bundle.open(out).search_prefix(4, np.ones((1, 64), np.float32), 3)[1].shape == (1, 3)


def test_add_and_delete_re_tune_on_the_new_rows(parts: Parts, tmp_path: Path):
    out = tmp_path / "bundles"
    parts.build("A", out, index_types=("object=hnsw", "relation=ivfpq-refine"))
    built = {p.length: p.tuning for p in Bundle.open(out).manifest.prefixes}
    added = add_rows(AddConfig(bundles=out, cache=parts.caches["B"], progress=False))
    assert "re-tuned" in added.actions["search parameters"]
    after_add = Bundle.open(out).manifest
    deleted = delete_rows(DeleteConfig(bundles=out, ids=tuple(parts.b_ids)))
    assert "re-tuned" in deleted.actions["search parameters"]
    after_delete = Bundle.open(out).manifest
    for length in (4, 16):
        # measured again (held-out rows drawn from 420 rows, then 300): a fresh record (not
        # compared with the build's: on rows this easy both can land on the same figures)
        assert built[length].status == "tuned"
        assert after_add.prefix(length).tuning.status == "tuned"
        assert after_add.prefix(length).tuning.queries == 256
        assert after_add.prefix(length).search == after_add.prefix(length).tuning.chosen
        assert after_delete.prefix(length).tuning.status == "tuned"
        assert after_delete.prefix(length).search == after_delete.prefix(length).tuning.chosen
    assert after_add.build["recall_target"] == 0.95


def test_verify_catches_a_search_setting_that_is_not_the_tuned_one(
    clustered: Inputs, tmp_path: Path
):
    out = tmp_path / "bundles"
    clustered.build(out, index_types=("object=hnsw",))
    path = Bundle.open(out).path
    assert verify_bundle(path).faults == []
    data = json.loads((path / MANIFEST).read_text())
    entry = next(p for p in data["prefixes"] if p["length"] == 4)
    entry["search"] = "efSearch=2048"
    entry["tuning"]["points"][0]["search"] = "nprobe=4"
    (path / MANIFEST).write_text(json.dumps(data))
    faults = [str(f) for f in verify_bundle(path).faults]
    assert any("searched with 'efSearch=2048', tuned to" in f for f in faults), faults
    assert any("'nprobe=4' does not apply to HNSW32,Flat" in f for f in faults), faults
