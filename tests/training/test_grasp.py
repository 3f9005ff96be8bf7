"""GraSP-VL: the loss terms move the right way, training beats truncation, artifacts round-trip."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from training.core.artifacts import TransformArtifact
from training.core.errors import InputError
from training.core.granularity import Granularity, default_contract
from training.core.metrics import NEGATIVE_LEVELS, present_rows, unit_rows
from training.core.rotations import orthogonality_error, pca_rotation, random_rotation
from training.grasp.baselines import baseline_artifact
from training.grasp.config import GraspConfig, LossWeights
from training.grasp.data import GraspSet, leave_one_out_means
from training.grasp.evaluate import evaluate, markdown_table, plot_hn_curves, retrieval_recall
from training.grasp.losses import (
    alignment_loss,
    info_nce,
    invariance_loss,
    preservation_loss,
    retention_loss,
    selective_ranking_loss,
)
from training.grasp.objective import transform_present_rows
from training.grasp.train import train_grasp

DIM = 32
CONTRACT = default_contract(DIM)  # 2 / 4 / 8 / 16 / 32


def constructed_set(n: int = 900, seed: int = 0) -> GraspSet:
    """Scenes whose factors live in known coordinates, object identity in the *last* ones.

    Object (8 values) in coordinates 24..31, attribute (6) in 16..23, relation (5) in 8..15,
    noise everywhere: plain truncation to D/16 = 2 coordinates sees no object at all, while a
    rotation can bring the object block to the front.
    """
    rng = np.random.default_rng(seed)

    def block(count: int, start: int) -> np.ndarray:
        vectors = np.zeros((count, DIM))
        vectors[:, start : start + 8] = rng.normal(size=(count, 8))
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    objects, attributes, relations = block(8, 24), block(6, 16), block(5, 8)
    o, a, r = rng.integers(0, 8, n), rng.integers(0, 6, n), rng.integers(0, 5, n)

    def scene(o, a, r, noise=0.0):
        return unit_rows(objects[o] + 0.8 * attributes[a] + 0.6 * relations[r] + noise)

    def other(values, size):
        return (values + rng.integers(1, size, len(values))) % size

    anchors = scene(o, a, r, 0.15 * rng.normal(size=(n, DIM)))
    views = {
        Granularity.OBJECT: unit_rows(objects[o]),
        Granularity.ATTRIBUTE: unit_rows(objects[o] + 0.8 * attributes[a]),
        Granularity.RELATION: unit_rows(objects[o] + 0.6 * relations[r]),
        Granularity.CAPTION: scene(o, a, r),
    }
    negatives = {
        "object": scene(other(o, 8), a, r),
        "attribute": scene(o, other(a, 6), r),
        "relation": scene(o, a, other(r, 5)),
    }
    split = np.where(np.arange(n) % 5 == 0, "val", np.where(np.arange(n) % 5 == 1, "test", "train"))
    return GraspSet(np.array([f"s{i}" for i in range(n)]), split, anchors, views, negatives)


def rotated(data: GraspSet, rotation: torch.Tensor) -> tuple:
    f = lambda x: torch.as_tensor(x, dtype=torch.float32) @ rotation.T  # noqa: E731
    views = {g: f(v) for g, v in data.views.items()}
    return f(data.anchors), views, {k: f(v) for k, v in data.negatives.items()}


class TestLosses:
    def test_alignment_prefers_matching_views(self):
        data = constructed_set(64)
        anchors, views, _ = rotated(data, torch.eye(DIM))
        shuffled = {
            g: v[torch.randperm(64, generator=torch.Generator().manual_seed(0))]
            for g, v in views.items()
        }
        right = alignment_loss(anchors, views, CONTRACT, 0.1)
        wrong = alignment_loss(anchors, shuffled, CONTRACT, 0.1)
        assert right < wrong
        assert retention_loss(anchors, views, CONTRACT, 0.1) < retention_loss(
            anchors, shuffled, CONTRACT, 0.1
        )

    def test_symmetric_alignment_also_scores_the_view_to_anchor_direction(self):
        generator = torch.Generator().manual_seed(1)
        anchors = torch.randn(8, DIM, generator=generator)
        hub = anchors.mean(dim=0, keepdim=True)  # views crowd together: the directions differ
        views = {
            g: anchors + 6 * hub + 0.01 * torch.randn(8, DIM, generator=generator)
            for g in (Granularity.OBJECT,)
        }
        one_way = alignment_loss(anchors, views, CONTRACT, 0.1)
        both = alignment_loss(anchors, views, CONTRACT, 0.1, symmetric=True)
        back = info_nce(views[Granularity.OBJECT], anchors, CONTRACT[Granularity.OBJECT], 0.1)
        assert torch.isclose(both, (one_way + back) / 2)
        assert not torch.isclose(both, one_way)

    def test_ranking_is_zero_when_negatives_are_far_and_positive_when_close(self):
        anchors = torch.randn(4, DIM, generator=torch.Generator().manual_seed(0))
        far = {"object": -anchors}
        close = {"object": anchors.clone()}
        assert selective_ranking_loss(anchors, anchors, far, CONTRACT, 0.1) == 0
        assert selective_ranking_loss(anchors, anchors, close, CONTRACT, 0.1) == pytest.approx(0.1)

    def test_rows_without_a_negative_are_skipped_and_keep_gradients_finite(self):
        anchors = torch.randn(4, DIM, generator=torch.Generator().manual_seed(0))
        close = anchors.clone()
        close[2:] = float("nan")  # rows 2 and 3 have no negative of this type
        loss = selective_ranking_loss(anchors, anchors, {"object": close}, CONTRACT, 0.1)
        assert loss == pytest.approx(0.1)
        none = {"object": torch.full_like(anchors, float("nan"))}
        assert selective_ranking_loss(anchors, anchors, none, CONTRACT, 0.1) == 0
        assert invariance_loss(anchors, anchors, none, CONTRACT) == 0
        rotation = torch.eye(DIM, requires_grad=True)
        negative = transform_present_rows(lambda x: x @ rotation.T, close)
        assert torch.isnan(negative[2:]).all() and not torch.isnan(negative[:2]).any()
        moved = anchors @ rotation.T
        selective_ranking_loss(moved, anchors, {"object": negative}, CONTRACT, 0.1).backward()
        assert rotation.grad is not None and torch.isfinite(rotation.grad).all()

    def test_invariance_rises_when_a_negative_is_separated_before_its_prefix(self):
        anchors = torch.zeros(4, DIM)
        anchors[:, 0] = 1.0
        same_early = anchors.clone()
        same_early[:, 10] = 1.0  # differs only after the attribute prefix (4)
        separated_early = anchors.clone()
        separated_early[:, 1] = 1.0  # differs inside the object prefix (2)
        low = invariance_loss(anchors, anchors, {"relation": same_early}, CONTRACT)
        high = invariance_loss(anchors, anchors, {"relation": separated_early}, CONTRACT)
        assert low == 0 and high > 0.05
        assert invariance_loss(anchors, anchors, {"object": separated_early}, CONTRACT) == 0

    def test_preservation_is_zero_for_a_rotation_only(self):
        x = torch.randn(20, DIM)
        pairs = torch.stack([torch.arange(20), torch.roll(torch.arange(20), 1)], dim=1)
        q = torch.as_tensor(random_rotation(DIM), dtype=torch.float32)
        assert preservation_loss(q, x, x @ q.T, pairs) < 1e-10
        m = torch.eye(DIM) + 0.3 * torch.randn(DIM, DIM)
        assert preservation_loss(m, x, x @ m.T, pairs) > 0.01


def test_training_lifts_selectivity_and_staircase_above_truncation(tmp_path: Path):
    data = constructed_set()
    config = GraspConfig(
        epochs=25, batch_size=128, learning_rate=0.02, patience=25, temperature=0.1
    )
    result = train_grasp(data, config, tmp_path / "work", progress=False, device="cpu")
    artifact = result.artifact
    assert orthogonality_error(artifact.rotation) < 1e-6
    test = data.of_split("test")
    grasp = evaluate(artifact.apply, test, CONTRACT)
    truncation = evaluate(lambda x: x, test, CONTRACT)
    assert grasp["selectivity"] > truncation["selectivity"] + 0.1
    assert grasp["staircase"] > truncation["staircase"]
    assert grasp["drift"] <= 1e-6
    obj = grasp["retrieval"]["object"][str(CONTRACT[Granularity.OBJECT])]["R@1"]
    assert obj > truncation["retrieval"]["object"][str(CONTRACT[Granularity.OBJECT])]["R@1"]


def test_training_and_scoring_skip_rows_without_a_negative(tmp_path: Path):
    """Real captions yield some negative types only now and then: NaN rows train and score."""
    from training.grasp.adapters import fit_adapter

    data = constructed_set(300)
    sparse = data.negatives["attribute"].copy()
    sparse[np.arange(len(sparse)) % 7 != 0] = np.nan  # one row in seven holds this type
    data.negatives["swap_attribute"] = sparse
    config = GraspConfig(epochs=3, batch_size=8, patience=10)  # most batches lack the type
    result = train_grasp(data, config, tmp_path / "w", progress=False, device="cpu")
    assert np.isfinite(result.artifact.rotation).all()
    assert orthogonality_error(result.artifact.rotation) < 1e-6
    assert all(np.isfinite(v) for entry in result.history for v in entry.values())
    report = evaluate(result.artifact.apply, data.of_split("test"), CONTRACT)
    assert set(report["hn_at_level"]) == set(data.negatives)
    assert np.isfinite(report["selectivity"]) and np.isfinite(report["staircase"])
    mlp = fit_adapter("mlp", data.of_split("train"), CONTRACT, config, epochs=1)
    assert np.isfinite(evaluate(mlp, data.of_split("test"), CONTRACT)["selectivity"])


def test_training_is_deterministic_and_resumes(tmp_path: Path):
    data = constructed_set(300)
    config = GraspConfig(epochs=3, batch_size=64, patience=10)
    first = train_grasp(data, config, tmp_path / "a", progress=False, device="cpu")
    second = train_grasp(data, config, tmp_path / "b", progress=False, device="cpu")
    np.testing.assert_array_equal(first.artifact.rotation, second.artifact.rotation)
    longer = config.model_copy(update={"epochs": 5})
    resumed = train_grasp(data, longer, tmp_path / "a", progress=False, device="cpu")  # new config
    assert resumed.epochs_run == 5 and len(resumed.history) == 5
    again = train_grasp(data, config, tmp_path / "b", progress=False, device="cpu")
    assert again.epochs_run == 3 and len(again.history) == 3  # the checkpoint was complete
    np.testing.assert_array_equal(again.artifact.rotation, first.artifact.rotation)


def weights_sha256(artifact: TransformArtifact, folder: Path) -> str:
    """The sha256 of the weights file `artifact.save` writes into `folder`."""
    artifact.save(folder)
    return hashlib.sha256((folder / "weights.safetensors").read_bytes()).hexdigest()


def test_the_seed_decides_the_weights_file(tmp_path: Path):
    data = constructed_set(300)

    def digest(seed: int, run: str) -> str:
        config = GraspConfig(epochs=2, batch_size=64, patience=10, seed=seed)
        result = train_grasp(data, config, tmp_path / f"work-{run}", progress=False, device="cpu")
        return weights_sha256(result.artifact, tmp_path / run)

    first = digest(3, "a")
    assert digest(3, "b") == first  # a fresh run, not a resumed one: its own work folder
    assert digest(4, "c") != first  # another data order


@pytest.mark.slow
def test_train_command_seed_reaches_the_config(tiny_clip, tmp_path: Path):
    from typer.testing import CliRunner

    from training.corpora.compositional import CompositionalCorpus
    from training.embedding.job import EmbedConfig, embed_corpus
    from training.grasp.cli import train_command

    cache = tmp_path / "cache"
    embed_corpus(CompositionalCorpus(scenes=300, seed=1), tiny_clip, cache,
                 EmbedConfig(dtype="float32", progress=False))  # fmt: skip
    out = tmp_path / "grasp"
    args = ["--cache", str(cache), "--out", str(out), "--views", str(tmp_path / "views.npz"),
            "--epochs", "1", "--seed", "7", "--device", "cpu", "--no-progress"]  # fmt: skip
    result = CliRunner().invoke(typer_app(train_command), args)
    assert result.exit_code == 0, result.output
    assert TransformArtifact.load(out).config["seed"] == 7
    bad = CliRunner().invoke(typer_app(train_command), [*args[:4], "--seed", "-1"])
    assert bad.exit_code == 2 and "--seed" in bad.output  # a usage error, before any work


def typer_app(command):
    """One command as a typer app, for CliRunner."""
    import typer

    app = typer.Typer(pretty_exceptions_enable=False)
    app.command()(command)
    return app


def test_switching_a_term_off_removes_it(tmp_path: Path):
    from training.grasp.objective import loss_terms

    data = constructed_set(64)
    batch = data.tensors()
    eye = torch.eye(DIM)
    everything = loss_terms(lambda x: x, batch, CONTRACT, GraspConfig(), eye)
    assert set(everything) == {"alignment", "retention", "ranking", "invariance", "preservation"}
    off = GraspConfig(weights=LossWeights(invariance=0))
    ablated = loss_terms(lambda x: x, batch, CONTRACT, off, eye)
    assert "invariance" not in ablated


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
