"""GraSP-VL scored: baselines and the report, adapters, retrieval recall, the set's round trip,
views of real captions, agreement with expert judgments."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from grasp_sets import CONTRACT, DIM, constructed_set

from training.core.artifacts import TransformArtifact
from training.core.errors import InputError
from training.core.granularity import Granularity
from training.core.metrics import NEGATIVE_LEVELS, present_rows, unit_rows
from training.core.rotations import orthogonality_error, pca_rotation, random_rotation
from training.grasp.baselines import baseline_artifact
from training.grasp.config import GraspConfig
from training.grasp.data import GraspSet, leave_one_out_means
from training.grasp.evaluate import evaluate, markdown_table, plot_hn_curves, retrieval_recall


def test_baselines_and_report(tmp_path: Path):
    data = constructed_set(300)
    for name in ("identity", "pca", "random"):
        artifact = baseline_artifact(name, data.of_split("train"), CONTRACT)
        assert orthogonality_error(artifact.rotation) < 1e-6
        artifact.save(tmp_path / name)
        assert TransformArtifact.load(tmp_path / name).method == f"baseline:{name}"
    with pytest.raises(InputError, match="unknown baseline"):
        baseline_artifact("mlp", data, CONTRACT)
    samples = data.anchors
    ordered = samples @ pca_rotation(samples).T
    variances = (ordered**2).mean(axis=0)
    assert np.all(np.diff(variances) <= 1e-9)
    test = data.of_split("test")
    reports = {"identity": evaluate(lambda x: x, test, CONTRACT)}
    assert "| identity |" in markdown_table(reports)
    assert reports["identity"]["hn_triples"] == {
        kind: int(present_rows(n).sum())
        for kind, n in test.negatives.items()
        if present_rows(n).any()
    }  # the sample behind each HN curve, which the plot's legend says
    png = plot_hn_curves(reports, tmp_path / "hn.png", split="test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_adapters_are_scored_like_artifacts():
    from training.grasp.adapters import fit_adapter

    data = constructed_set(400)
    test = data.of_split("test")
    config = GraspConfig(batch_size=64)
    mlp = evaluate(
        fit_adapter("mlp", data.of_split("train"), CONTRACT, config, epochs=5), test, CONTRACT
    )
    mrl = evaluate(
        fit_adapter("mrl", data.of_split("train"), CONTRACT, config, epochs=5), test, CONTRACT
    )
    assert mlp["drift"] > 1e-3  # a free map changes full-length cosine
    assert 0.0 <= mrl["selectivity"] <= 1.0 and mrl["drift"] > 0
    with pytest.raises(InputError, match="unknown adapter"):
        fit_adapter("svd", data, CONTRACT, config)


def test_retrieval_recall_counts_identical_views_once_and_ties_as_misses():
    views = np.array([[1.0, 0], [1.0, 0], [0, 1.0]])
    anchors = np.array([[1.0, 0.1], [1.0, 0.1], [0.1, 1.0]])
    assert retrieval_recall(anchors, views, 2, (1,)) == {1: 1.0}
    flat = np.array([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    assert retrieval_recall(flat, np.array([[0.0, 1.0], [0.0, 1.0], [1.0, 1.0]]), 1, (1,)) == {
        1: 0.0
    }


def test_full_length_retrieval_is_the_same_for_every_rotation():
    """Cosine is kept, so R@1 at D cannot depend on the rotation — even when a rotation's
    rounding noise makes copies of one view differ in the last bits."""
    data = constructed_set(300)
    full = str(DIM)
    rotation = random_rotation(DIM, 4)
    rng = np.random.default_rng(0)

    def rotate_with_rounding_noise(x: np.ndarray) -> np.ndarray:
        return x @ rotation.T + rng.normal(scale=1e-8, size=x.shape)

    reports = [evaluate(f, data, CONTRACT) for f in (lambda x: x, rotate_with_rounding_noise)]
    recalls = [r["retrieval"][g][full]["R@1"] for r in reports for g in ("object", "caption")]
    assert recalls[:2] == pytest.approx(recalls[2:], abs=1e-9)


def test_leave_one_out_means():
    x = unit_rows(np.array([[1.0, 0], [0, 1.0], [1.0, 1.0], [1.0, 0], [0, 1.0], [1.0, 1.0]]))
    anchors, has_anchor = leave_one_out_means(x, ["a", "a", "a", "b", "b", "c"])
    np.testing.assert_allclose(anchors[0], unit_rows((x[1] + x[2])[None])[0])
    np.testing.assert_allclose(anchors[3], x[4])
    assert has_anchor.tolist() == [True] * 5 + [False]  # alone in its group: no anchor


def test_set_round_trip(tmp_path: Path):
    data = constructed_set(50)
    data.save(tmp_path / "v.npz")
    loaded = GraspSet.load(tmp_path / "v.npz")
    np.testing.assert_array_equal(loaded.anchors, data.anchors)
    assert set(loaded.negatives) == set(data.negatives) and list(loaded.split) == list(data.split)
    with pytest.raises(InputError, match="no rows in split"):
        data.of_split("dev")


def test_real_captions_get_extracted_views_and_leave_one_out_anchors(tiny_clip, tmp_path: Path):
    from training.core.cache import EmbeddingCache
    from training.corpora import open_corpus
    from training.embedding.job import EmbedConfig, embed_corpus
    from training.grasp.data import build_from_cache

    captions = {
        "a.jpg": ["A black dog is chasing a cat .", "A dog runs on grass .", "Dog ."],
        "b.jpg": ["A little girl is climbing the stairs .", "A girl climbs stairs .", "Stairs ."],
    }
    flickr = tmp_path / "flickr"
    flickr.mkdir()
    lines = [f"{img}#{i}\t{c}" for img, caps in captions.items() for i, c in enumerate(caps)]
    (flickr / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    embed_corpus(
        open_corpus("flickr8k", flickr), tiny_clip, tmp_path / "c", EmbedConfig(progress=False)
    )
    cache = EmbeddingCache.open(tmp_path / "c")
    data = build_from_cache(cache, tiny_clip)
    assert list(data.ids) == ["a.jpg#0", "b.jpg#0"]  # the only captions with every view
    everything = cache.embeddings("text")
    expected = unit_rows(everything[[1, 2]].sum(axis=0, keepdims=True))[0]
    np.testing.assert_allclose(data.anchors[0], expected, atol=1e-5)
    np.testing.assert_allclose(data.views[Granularity.CAPTION][1], everything[3], atol=1e-6)
    # all seven types; a caption without one of a type is NaN there, not left out
    assert set(data.negatives) == set(NEGATIVE_LEVELS)
    assert present_rows(data.negatives["order"]).tolist() == [True, False]
    assert present_rows(data.negatives["object"]).tolist() == [True, True]
    # a sample of the usable rows is all that is embedded, drawn from the seed
    sample = build_from_cache(cache, tiny_clip, seed=3, max_rows=1)
    assert len(sample.ids) == 1 and sample.ids[0] in {"a.jpg#0", "b.jpg#0"}
    again = build_from_cache(cache, tiny_clip, seed=3, max_rows=1)
    assert list(again.ids) == list(sample.ids)
    np.testing.assert_array_equal(again.anchors, sample.anchors)


def test_a_sample_of_rows_is_drawn_from_the_seed_and_kept_in_order():
    from training.grasp.data import sampled_rows

    rows = np.arange(10, 60)
    assert sampled_rows(rows, None, 0) is rows and sampled_rows(rows, 50, 0) is rows
    drawn = sampled_rows(rows, 7, seed=1)
    assert len(drawn) == 7 and len(set(drawn)) == 7 and set(drawn) <= set(rows)
    assert list(drawn) == sorted(drawn)
    np.testing.assert_array_equal(drawn, sampled_rows(rows, 7, seed=1))
    assert any(not np.array_equal(drawn, sampled_rows(rows, 7, seed=s)) for s in range(2, 6))


def test_agreement_with_expert_judgments(tmp_path: Path):
    from training.grasp.agreement import (
        agreement,
        average_ranks,
        ndcg_at,
        read_expert_judgments,
        spearman,
    )

    assert average_ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [3.5, 1.0, 3.5, 2.0]
    assert spearman(np.array([1.0, 2, 3]), np.array([10.0, 20, 30])) == pytest.approx(1.0)
    assert ndcg_at(np.array([0.9, 0.1]), np.array([3.0, 0.0]), ["q", "q"]) == 1.0
    assert ndcg_at(np.array([0.1, 0.9]), np.array([3.0, 0.0]), ["q", "q"]) < 1.0

    # two images with two captions each; experts like the matching image's caption
    vectors = unit_rows(np.array([[1.0, 0.1], [1.0, -0.1], [0.1, 1.0], [-0.1, 1.0]]))
    ids, groups = ["a#0", "a#1", "b#0", "b#1"], ["a", "a", "b", "b"]
    path = tmp_path / "ExpertAnnotations.txt"
    path.write_text(
        "a\tb#0\t1\t1\t1\na\ta#1\t4\t4\t3\nb\tb#1\t4\t4\t4\nb\ta#0\t1\t2\t1\nb\tz#0\t4\t4\t4\n"
    )
    judgments = read_expert_judgments(path)
    result = agreement(lambda x: x, judgments, vectors, ids, groups, [1, 2])
    assert result["pairs"] == 4 and result["skipped"] == 1  # z#0 is not in the cache
    assert result["prefix"]["2"]["spearman"] > 0.8
    assert result["prefix"]["2"]["ndcg@10"] == pytest.approx(1.0)
    path.write_text("a\tb#0\tx\n")
    with pytest.raises(InputError, match=r"ExpertAnnotations\.txt:1"):
        read_expert_judgments(path)
