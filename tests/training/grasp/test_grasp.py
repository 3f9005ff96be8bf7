"""GraSP-VL: the loss terms move the right way, training beats truncation, seeds and resumes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
from grasp_sets import CONTRACT, DIM, constructed_set, rotated

from training.core.artifacts import TransformArtifact
from training.core.granularity import Granularity
from training.core.rotations import orthogonality_error, random_rotation
from training.grasp.config import GraspConfig, LossWeights
from training.grasp.evaluate import evaluate
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
    embed_corpus(
        CompositionalCorpus(scenes=300, seed=1),
        tiny_clip,
        cache,
        EmbedConfig(dtype="float32", progress=False),
    )
    out = tmp_path / "grasp"
    args = [
        "--cache",
        str(cache),
        "--out",
        str(out),
        "--views",
        str(tmp_path / "views.npz"),
        "--epochs",
        "1",
        "--seed",
        "7",
        "--device",
        "cpu",
        "--no-progress",
    ]
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
