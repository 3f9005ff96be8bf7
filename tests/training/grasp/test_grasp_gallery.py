"""Granularity retrieval on a held-out gallery: mentions, mined queries judged by the other
captions, P@10 / AP@100, the gallery-fitting terms, and a gallery-fitted training run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_grasp import CONTRACT, DIM, constructed_set, weights_sha256

from training.core.granularity import Granularity
from training.core.rotations import centred_principal_axes, orthogonality_error
from training.grasp.config import GALLERY_RECIPE, GraspConfig, LossWeights
from training.grasp.evaluate import gallery_items
from training.grasp.gallery import (
    QuerySet,
    RetrievalTask,
    gallery_retrieval,
    gallery_table,
    mine_queries,
    plot_gallery_curves,
    ranking_scores,
    scene_mentions,
)
from training.grasp.losses import multi_positive_retrieval_loss, ranking_distillation_loss
from training.grasp.objective import GalleryFit
from training.grasp.train import train_grasp
from training.views.mentions import caption_mentions, ing_form, verb_lemma, vocabulary_queries

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_mentions_fold_plurals_and_verb_forms():
    m = caption_mentions("Two black dogs are chasing a red ball on the grass .")
    assert {"dog", "ball", "grass"} <= m.nouns
    assert {("black", "dog"), ("red", "ball")} <= m.phrases
    assert list(m.relations) == [("dog", "chase", "ball")]
    assert m.relations[("dog", "chase", "ball")] == "a dog chasing a ball"
    # the same relation however the verb is written
    assert list(caption_mentions("A dog chases a ball").relations) == [("dog", "chase", "ball")]
    assert [ing_form(v) for v in ("run", "ride", "lie", "ski", "play")] == [
        "running",
        "riding",
        "lying",
        "skiing",
        "playing",
    ]
    assert verb_lemma("swimming") == verb_lemma("swims") == "swim"
    bank = vocabulary_queries(per_kind=50)
    assert "a dog" in bank["object"] and len(bank["attribute"]) <= 50


def test_relevance_is_judged_by_the_other_captions_only():
    captions = [
        # image a: three of five captions say dog
        "A dog runs .", "A dog jumps .", "A brown dog sits .", "An animal runs .", "A pet .",
        # image b: two of five say dog
        "A dog swims .", "A dog in water .", "A lake .", "Water .", "A swimmer .",
        # image c: no dog
        "A man .", "A man walks .", "A person .", "A boy .", "A guy .",
    ]  # fmt: skip
    groups = [g for g in "abc" for _ in range(5)]
    queries = mine_queries(captions, groups, min_relevant=1)
    dog = queries[Granularity.OBJECT].keys.index("dog")
    relevant = queries[Granularity.OBJECT].relevant[dog]
    # a: a dog caption has 2 other dog captions (relevant), a non-dog one has 3
    assert relevant[:5].all()
    # b: a dog caption has only 1 other; a non-dog caption has 2
    assert list(relevant[5:10]) == [False, False, True, True, True]
    assert not relevant[10:].any()
    assert queries[Granularity.OBJECT].texts[dog] == "a dog"
    # a phrase needs one other caption: the caption that says "brown dog" is not found for it,
    # the other four captions of its image are
    attributes = queries[Granularity.ATTRIBUTE]
    brown = attributes.relevant[attributes.keys.index(("brown", "dog"))]
    assert list(brown[:5]) == [True, True, False, True, True] and not brown[5:].any()
    # min_relevant drops rare queries
    assert "boy" not in mine_queries(captions, groups, min_relevant=6)[Granularity.OBJECT].keys


def test_scene_mentions_judge_by_the_own_caption():
    mentions = scene_mentions(
        ["dog", "cat", "dog"],
        ["black", "white", "white"],
        ["chasing", "chasing", "chasing"],
        ["ball", "ball", "cat"],
        ["red", "red", "black"],
        ["a dog chasing a ball", "a cat chasing a ball", "a dog chasing a cat"],
    )
    queries = mine_queries(mentions, ["s0", "s1", "s2"], min_relevant=1, own_caption=True)
    objects = queries[Granularity.OBJECT]
    assert list(objects.relevant[objects.keys.index("cat")]) == [False, True, True]
    relations = queries[Granularity.RELATION]
    assert relations.texts[relations.keys.index(("dog", "chasing", "ball"))] == (
        "a dog chasing a ball"
    )


def test_precision_and_average_precision():
    gallery = np.eye(4, dtype=np.float32)
    query = np.array([[1.0, 0.5, 0.0, 0.0]], dtype=np.float32)  # ranks rows 0, 1, then 2, 3
    first = ranking_scores(query, gallery, np.array([[True, False, False, False]]), 4)
    assert first["AP@100"][0] == pytest.approx(1.0)
    assert first["P@10"][0] == pytest.approx(0.1)  # 1 relevant in the top 10 (of 4 rows)
    second = ranking_scores(query, gallery, np.array([[False, True, False, False]]), 4)
    assert second["AP@100"][0] == pytest.approx(0.5)
    # at prefix 1 only row 0 scores: row 1 ties with the rest, found by row order
    assert ranking_scores(query, gallery, np.array([[True, False, False, False]]), 1)["AP@100"][
        0
    ] == pytest.approx(1.0)


def test_centred_principal_axes_put_the_mean_last():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(500, 16)) + 3.0 * np.eye(16)[0]
    axes = centred_principal_axes(rows)
    assert orthogonality_error(axes) < 1e-10
    mean = rows.mean(axis=0) / np.linalg.norm(rows.mean(axis=0))
    assert abs(axes[-1] @ mean) == pytest.approx(1.0)


def test_centred_principal_axes_of_rank_deficient_rows():
    """Rows of rank 5 in 16 dimensions: the projected second moment has eleven zero
    eigenvalues, among whose eigenvectors LAPACK may spread the mean; still 16 orthonormal axes,
    the mean last, the rows' spread first."""
    rng = np.random.default_rng(1)
    basis = np.linalg.qr(rng.normal(size=(16, 5)))[0].T
    rows = (rng.normal(size=(400, 5)) + np.array([4.0, 1.0, 0.0, 0.0, 0.0])) @ basis
    axes = centred_principal_axes(rows)
    assert axes.shape == (16, 16)
    assert orthogonality_error(axes) < 1e-10
    mean = rows.mean(axis=0) / np.linalg.norm(rows.mean(axis=0))
    assert abs(axes[-1] @ mean) == pytest.approx(1.0)
    # the rows' four directions besides the mean come first: nothing of them past axis 4
    assert np.abs(rows @ axes[4:-1].T).max() < 1e-9


def test_retrieval_and_distillation_losses():
    rows = torch.eye(4)
    queries = torch.tensor([[1.0, 0.2, 0.0, 0.0]])
    right = multi_positive_retrieval_loss(
        queries, rows, torch.tensor([[True, False, False, False]]), 4, 0.1
    )
    wrong = multi_positive_retrieval_loss(
        queries, rows, torch.tensor([[False, False, True, False]]), 4, 0.1
    )
    assert right < wrong
    # no relevant row in the batch: no signal
    none = torch.zeros(1, 4, dtype=torch.bool)
    assert multi_positive_retrieval_loss(queries, rows, none, 4, 0.1) == 0
    # at full length the prefix ranks as the full vector does
    assert ranking_distillation_loss(queries, rows, 4, 0.1) == pytest.approx(0.0, abs=1e-6)
    # at prefix 1 the query's second coordinate is cut, so row 1 falls behind where it was
    close = torch.tensor([[1.0, 0.9, 0.0, 0.0]])
    assert ranking_distillation_loss(close, rows, 1, 0.1) > 0.1


def object_task(data, split: str) -> RetrievalTask:
    """Each distinct object view is a query; its rows are the anchors of that object."""
    part = data.of_split(split)
    items = gallery_items(part.views[Granularity.OBJECT])
    _, first = np.unique(items, return_index=True)
    relevant = items[None, :] == np.arange(len(first))[:, None]
    queries = QuerySet(
        Granularity.OBJECT, [f"o{i}" for i in range(len(first))], list(range(len(first))), relevant
    )
    embedded = part.views[Granularity.OBJECT][first].astype(np.float32)
    return RetrievalTask(
        part.anchors.astype(np.float32),
        {Granularity.OBJECT: queries},
        {Granularity.OBJECT: embedded},
    )


def test_a_gallery_fitted_rotation_finds_objects_at_the_first_prefix(tmp_path: Path):
    data = constructed_set(600)
    test = object_task(data, "test")
    fit = GalleryFit(
        gallery=test.rows,
        task=object_task(data, "train"),
        validation=object_task(data, "val"),
        query_bank={Granularity.OBJECT: object_task(data, "train").embedded[Granularity.OBJECT]},
    )
    config = GraspConfig(
        epochs=6,
        batch_size=64,
        learning_rate=0.02,
        patience=6,
        rows_per_step=256,
        queries_per_step=8,
        weights=LossWeights(alignment=0, retention=0),
    )
    result = train_grasp(data, config, tmp_path / "work", progress=False, device="cpu", fit=fit)
    rotation = result.artifact.rotation
    assert orthogonality_error(rotation) < 1e-6
    start = centred_principal_axes(test.rows)
    reports = {
        name: gallery_retrieval(lambda x, r=r: x @ r.T, test.pairs(), test.rows, CONTRACT)
        for name, r in {"truncation": np.eye(DIM), "start": start, "fitted": rotation}.items()
    }
    ap = {name: r["object"]["own"]["AP@100"] for name, r in reports.items()}
    assert ap["fitted"] > ap["start"] and ap["fitted"] > ap["truncation"]
    # epoch 0 (R0 itself) is a candidate, so the chosen epoch is never worse on validation
    metrics = result.artifact.metrics
    assert metrics["validation"]["val_score"] >= metrics["initial"]["val_score"]
    table = gallery_table(reports, CONTRACT)
    assert "| fitted |" in table and "object @2" in table
    png = plot_gallery_curves(reports, CONTRACT, tmp_path / "ap.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    task_file = tmp_path / "task.npz"
    test.save(task_file)
    loaded = RetrievalTask.load(task_file)
    np.testing.assert_array_equal(
        loaded.queries[Granularity.OBJECT].relevant, test.queries[Granularity.OBJECT].relevant
    )


def test_the_seed_decides_the_weights_file_of_the_gallery_recipe(tmp_path: Path):
    data = constructed_set(300)
    fit = GalleryFit(
        gallery=object_task(data, "test").rows,
        task=object_task(data, "train"),
        validation=object_task(data, "val"),
        query_bank={Granularity.OBJECT: object_task(data, "train").embedded[Granularity.OBJECT]},
    )

    def digest(seed: int, run: str) -> str:
        config = GALLERY_RECIPE.model_copy(
            update={
                "epochs": 2,
                "batch_size": 64,
                "rows_per_step": 128,
                "queries_per_step": 8,
                "seed": seed,
            }
        )
        result = train_grasp(
            data, config, tmp_path / f"work-{run}", progress=False, device="cpu", fit=fit
        )
        return weights_sha256(result.artifact, tmp_path / run)

    first = digest(3, "a")
    assert digest(3, "b") == first
    assert digest(4, "c") != first  # another data order and other gallery samples
