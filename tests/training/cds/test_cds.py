"""CDS: EMD, the shifted-crop geometry, thresholds, outlier tokens, the constructed model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from pydantic import ValidationError

from training.cds.config import CdsConfig
from training.cds.constructed import ConstructedViT, synthetic_images
from training.cds.cropping import CropGeometry, shifted_crops, square_canvas
from training.cds.emd import (
    bimodality_coefficient,
    choose_threshold,
    contextual_dependency_score,
    earth_movers_distance,
    grid_diagonal,
    ground_cost,
    otsu_threshold,
    roc_auc,
    scopes,
)
from training.cds.images import ImageSource
from training.cds.outliers import outlier_mask, outlier_rule, outlier_share, token_norms
from training.cds.patches import OpenClipPatches, concept_activations
from training.cds.score import TopImages, collect_patch_tokens, fit_patch_sae, score_features
from training.core.config import build_config
from training.core.encoders import load_encoder
from training.core.errors import InputError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def images() -> list[Image.Image]:
    return synthetic_images(24, size=96, seed=5)


def point(side: int, row: int, col: int, mass: float = 1.0) -> np.ndarray:
    grid = np.zeros((side, side))
    grid[row, col] = mass
    return grid.reshape(-1)


# -- EMD and the score ---------------------------------------------------------------------------
class TestEmd:
    def test_identical_maps_are_at_zero(self):
        rng = np.random.default_rng(0)
        a = np.clip(rng.normal(size=49), 0, None)
        assert earth_movers_distance(a, a, ground_cost(7)) == pytest.approx(0.0, abs=1e-12)
        assert earth_movers_distance(a, 3 * a, ground_cost(7)) == pytest.approx(0.0, abs=1e-12)

    def test_a_moved_point_is_at_its_distance(self):
        cost = ground_cost(8)
        assert earth_movers_distance(point(8, 1, 2), point(8, 4, 6), cost) == pytest.approx(5.0)
        assert earth_movers_distance(point(8, 0, 0), point(8, 7, 7), cost) == pytest.approx(
            grid_diagonal(8)
        )

    def test_a_rigidly_shifted_map_moves_by_the_shift(self):
        """Two masses moved by (3, 4) each: the solver (not the point-mass shortcut) gives 5."""
        a = point(8, 0, 0, 0.25) + point(8, 2, 1, 0.75)
        b = point(8, 3, 4, 0.25) + point(8, 5, 5, 0.75)
        assert earth_movers_distance(a, b, ground_cost(8)) == pytest.approx(5.0)

    def test_negative_activations_are_clipped_and_empty_maps_refused(self):
        a = point(5, 2, 2) - point(5, 0, 0)  # the −1 is clipped away
        assert earth_movers_distance(a, point(5, 2, 2), ground_cost(5)) == pytest.approx(0.0)
        with pytest.raises(ValueError, match="positive mass"):
            earth_movers_distance(np.zeros(25), point(5, 1, 1), ground_cost(5))

    def test_cds_is_the_mean_emd_over_the_diagonal_and_skips_empty_maps(self):
        side = 6
        a = np.stack([point(side, 2, 2), point(side, 1, 1), np.zeros(side * side)])
        b = np.stack([point(side, 3, 3), point(side, 1, 1), point(side, 0, 0)])
        cds, used = contextual_dependency_score(a, b, side)
        assert used == 2
        assert cds == pytest.approx((math.sqrt(2) + 0) / 2 / (math.sqrt(2) * (side - 1)))
        assert math.isnan(contextual_dependency_score(a[2:], b[2:], side)[0])


# -- cropping ------------------------------------------------------------------------------------
class TestCropping:
    def test_vit_b_16_layout(self):
        g = CropGeometry(grid=14, patch=16, shift=1)
        assert (g.canvas, g.crop, g.offset, g.shared_side) == (240, 224, 16, 13)
        assert g.box_b == (16, 16, 240, 240)
        assert g.diagonal == pytest.approx(math.sqrt(2) * 12)
        # shared patch 0 is A's (1, 1) and B's (0, 0); the last is A's (13, 13), B's (12, 12)
        assert (g.shared_a[0], g.shared_b[0]) == (1 * 14 + 1, 0)
        assert (g.shared_a[-1], g.shared_b[-1]) == (13 * 14 + 13, 12 * 14 + 12)

    @pytest.mark.parametrize("shift", [1, 2, 3])
    def test_shared_patches_hold_the_same_pixels(self, shift: int):
        g = CropGeometry(grid=6, patch=4, shift=shift)
        rng = np.random.default_rng(shift)
        canvas = Image.fromarray(rng.integers(0, 256, (g.canvas, g.canvas, 3), dtype=np.uint8))
        crop_a, crop_b = shifted_crops(canvas, g)
        assert crop_a.size == crop_b.size == (g.crop, g.crop)

        def patches(crop: Image.Image) -> np.ndarray:
            x = np.asarray(crop).reshape(g.grid, g.patch, g.grid, g.patch, 3)
            return x.transpose(0, 2, 1, 3, 4).reshape(g.grid * g.grid, -1)

        pa, pb = patches(crop_a), patches(crop_b)
        np.testing.assert_array_equal(pa[g.shared_a], pb[g.shared_b])
        assert not np.array_equal(pa[g.shared_b], pb[g.shared_b])  # the grids do differ
        maps_a, maps_b = g.shared(np.arange(36.0), np.arange(36.0))
        assert maps_a.shape == maps_b.shape == ((6 - shift) ** 2,)

    def test_canvas_of_a_wide_image_is_its_centre(self):
        wide = Image.new("RGB", (300, 100), (255, 0, 0))
        wide.paste((0, 0, 255), (0, 0, 100, 100))  # a blue left third, cropped away
        canvas = square_canvas(wide, 50)
        assert canvas.size == (50, 50)
        assert np.asarray(canvas)[:, :, 0].min() > 200

    @pytest.mark.parametrize(("grid", "shift"), [(8, 0), (8, 7), (2, 1)])
    def test_bad_shifts_are_refused(self, grid: int, shift: int):
        with pytest.raises(InputError):
            CropGeometry(grid=grid, patch=8, shift=shift)


# -- thresholds and AUC --------------------------------------------------------------------------
class TestThreshold:
    def test_otsu_splits_two_clusters(self):
        rng = np.random.default_rng(0)
        values = np.concatenate([rng.normal(0.02, 0.005, 60), rng.normal(0.2, 0.02, 30)])
        t = otsu_threshold(values)
        assert 0.04 < t < 0.16
        chosen = choose_threshold(values)
        assert chosen.rule == "otsu" and chosen.value == t and chosen.bimodality > 5 / 9

    def test_unimodal_scores_fall_back_to_the_median(self):
        values = np.random.default_rng(1).normal(0.1, 0.01, 200)
        assert bimodality_coefficient(values) < 5 / 9
        chosen = choose_threshold(values)
        assert chosen.rule == "median" and chosen.value == pytest.approx(np.median(values))
        assert "not bimodal" in chosen.reason

    def test_other_rules_and_nan(self):
        values = np.array([0.0, 0.0, 0.01, 0.3, 0.31, math.nan])
        assert choose_threshold(values).rule == "median"  # only 5 finite scores
        assert choose_threshold(values, "0.05").value == 0.05
        assert 0.01 < choose_threshold(values, "gmm").value < 0.3
        assert scopes(values, 0.05) == ["local", "local", "local", "global", "global", None]
        with pytest.raises(InputError, match="unknown threshold rule"):
            choose_threshold(values, "valley")

    def test_roc_auc(self):
        labels = np.array([0, 0, 1, 1], dtype=bool)
        assert roc_auc(np.array([0.1, 0.2, 0.3, 0.4]), labels) == 1.0
        assert roc_auc(np.array([0.4, 0.3, 0.2, 0.1]), labels) == 0.0
        assert roc_auc(np.array([0.1, 0.3, 0.3, 0.4]), labels) == 0.875  # a tie counts half
        assert math.isnan(roc_auc(np.array([0.1, 0.2]), np.array([True, True])))


# -- outliers ------------------------------------------------------------------------------------
class TestOutliers:
    def test_the_planted_high_norm_token_is_found(self):
        rng = np.random.default_rng(0)
        tokens = rng.normal(size=(20, 2, 49, 16))  # images, crops, patches, width
        tokens[:, :, 24] *= 12.0  # a register-like token at the centre of a 7 x 7 grid
        norms = token_norms(tokens)
        rule = outlier_rule(norms)
        mask = outlier_mask(norms, rule)
        assert mask[:, :, 24].all() and mask.sum() == 40
        assert rule.outliers == 40 and rule.tokens == 20 * 2 * 49

    def test_no_outliers_in_a_plain_bulk(self):
        norms = token_norms(np.random.default_rng(1).normal(size=(500, 32)))
        assert outlier_rule(norms).outliers == 0

    def test_share(self):
        acts = np.array([[1.0, 3.0, 0.0, -5.0]])
        assert outlier_share(acts, np.array([[False, True, True, True]])) == pytest.approx(0.75)
        assert math.isnan(outlier_share(np.zeros((1, 4)), np.ones((1, 4), bool)))


# -- the pipeline --------------------------------------------------------------------------------
def test_top_images_keeps_the_m_best_eligible_images():
    top = TopImages(n_features=2, m=2, n_patches=3)
    maps = np.arange(3 * 2 * 3 * 2, dtype=np.float32).reshape(3, 2, 3, 2)
    top.add(np.array([0, 1, 2]), np.array([[1.0, -np.inf], [3.0, 5.0], [2.0, -np.inf]]), maps)
    images, kept = top.of(0)
    assert images.tolist() == [1, 2]
    np.testing.assert_array_equal(kept[0], maps[1, :, :, 0])
    assert top.of(1)[0].tolist() == [1]
    top.add(np.array([3]), np.array([[2.5, 0.5]]), maps[:1])
    assert top.of(0)[0].tolist() == [1, 3] and top.of(1)[0].tolist() == [1, 3]


def test_concept_activations_are_signed_axes():
    rows = torch.tensor([[1.0, -2.0], [0.5, 0.0]])
    acts = concept_activations(rows, torch.eye(2), torch.zeros(2))
    assert acts.tolist() == [[1.0, 0.0, 0.0, 2.0], [0.5, 0.0, 0.0, 0.0]]


class TestConstructed:
    def test_cds_separates_local_from_global(self, images: list[Image.Image]):
        model = ConstructedViT(seed=0)
        result = score_features(
            model,
            model.features(),
            ImageSource.from_images(images),
            CdsConfig(top_m=8),
            progress=False,
        )
        truth = result.ground_truth()
        assert truth is not None and truth["auc"] >= 0.95
        local = [f for f in result.features if f.kind == "local"]
        register = [f for f in result.features if f.kind == "register"]
        assert all(f.cds == pytest.approx(0.0, abs=1e-6) for f in local)
        shift_over_diagonal = 1 / (model.grid - 1 - 1)
        assert all(f.cds == pytest.approx(shift_over_diagonal) for f in register)
        assert all(f.outlier_share == pytest.approx(1.0) for f in register)
        assert truth["by_kind"]["global"]["mean_outlier_share"] > 0.25
        # the planted register token is the outlier, and only it, in every crop
        centre = {"row": model.grid // 2, "col": model.grid // 2, "count": 2 * len(images)}
        assert result.positions == [centre] and result.outliers.outliers == 2 * len(images)
        summary = json.loads(json.dumps(result.summary()))
        assert summary["ground_truth"]["auc"] == truth["auc"]

    def test_cds_separates_them_with_a_position_embedding(self, images: list[Image.Image]):
        model = ConstructedViT(seed=1, position_strength=0.3, content_mix=0.9)
        result = score_features(
            model,
            model.features(),
            ImageSource.from_images(images),
            CdsConfig(top_m=8),
            progress=False,
        )
        truth = result.ground_truth()
        assert truth is not None and truth["auc"] >= 0.95

    def test_an_sae_on_its_tokens(self, images: list[Image.Image]):
        model = ConstructedViT(seed=0, n_local=8, n_context=4, n_register=4)
        source = ImageSource.from_images(images[:8])
        config = CdsConfig(top_m=4)
        tokens = collect_patch_tokens(model, source, config, max_tokens=2000, progress=False)
        assert tokens.shape[1] == model.width and len(tokens) <= 2 * 8 * 64
        sae = fit_patch_sae(tokens, n_latents=32, k=4, epochs=2, progress=False)
        from training.cds.patches import sae_features

        result = score_features(model, sae_features(sae, 4), source, config, progress=False)
        assert len(result.features) == 32 and result.ground_truth() is None
        assert any(math.isfinite(f.cds) for f in result.features)
        with pytest.raises(InputError, match="multiple of the token width"):
            fit_patch_sae(tokens, n_latents=20)


class TestOpenClipPatches:
    def test_tokens_match_open_clips_own_forward(self, tiny_clip):
        patches = OpenClipPatches.from_encoder(tiny_clip)
        assert patches.grid == 4 and patches.patch_size == 8 and patches.n_layers == 1
        pixels = torch.randn(3, 3, 32, 32)
        tokens, joint = patches.forward(pixels, layer=1)
        visual = tiny_clip.model.visual
        with torch.inference_mode():
            theirs = visual.forward_intermediates(
                pixels, indices=[0], output_fmt="NLC", intermediates_only=True
            )["image_intermediates"][0]
            pooled = tiny_clip.model.encode_image(pixels)
        torch.testing.assert_close(tokens, theirs)
        assert joint.shape == (3, 16, 32)
        torch.testing.assert_close(joint.norm(dim=-1), torch.ones(3, 16))
        # the same head as the pooled class token: ln_post then proj
        torch.testing.assert_close(
            torch.nn.functional.normalize(visual.ln_post(tokens) @ visual.proj, dim=-1), joint
        )
        assert pooled.shape == (3, 32)

    def test_layers(self, tiny_clip):
        patches = OpenClipPatches.from_encoder(tiny_clip)
        assert patches.resolve_layer(None) == 1 and patches.resolve_layer(-1) == 1
        assert patches.resolve_layer(0) == 0
        for bad in (2, -2):
            with pytest.raises(InputError, match="--layer must be between 0 and 1"):
                patches.resolve_layer(bad)

    def test_a_text_only_encoder_is_refused(self, tmp_path: Path):
        config = {
            "embed_dim": 16,
            "vision_cfg": {"image_size": 32, "layers": [1, 1, 1, 1], "width": 8},
            "text_cfg": {
                "context_length": 8,
                "vocab_size": 49408,
                "width": 16,
                "heads": 2,
                "layers": 1,
            },
        }
        path = tmp_path / "tiny-resnet.json"
        path.write_text(json.dumps(config))
        resnet = load_encoder(f"open_clip:{path}", device="cpu")
        with pytest.raises(InputError, match=r"needs a ViT image tower.*ModifiedResNet"):
            OpenClipPatches.from_encoder(resnet)


def test_undecodable_images_are_skipped(tmp_path: Path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i, image in enumerate(synthetic_images(3, size=64, seed=2)):
        image.save(folder / f"{i}.png")
    (folder / "broken.jpg").write_bytes(b"not a jpeg")
    source = ImageSource.from_folder(folder)
    assert len(source) == 4
    batches = list(source.batches(8))
    assert len(batches[0][1]) == 3 and batches[0][2] == ["broken.jpg"]
    with pytest.raises(InputError, match="image folder not found"):
        ImageSource.from_folder(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no image files"):
        ImageSource.from_folder(tmp_path / "empty")


@pytest.mark.parametrize(
    "values",
    [
        {"top_m": 0},
        {"top_m": True},
        {"batch_size": 2.0},
        {"shift": -1},
        {"outlier_z": 0},
        {"outlier_ratio": math.nan},
        {"top_n": 3},
    ],
)
def test_cds_config_refuses_what_it_always_refused(values: dict) -> None:
    with pytest.raises(ValidationError):
        CdsConfig(**values)
    with pytest.raises(InputError, match=r"^strata eval cds: "):
        build_config(CdsConfig, values, "strata eval cds")
