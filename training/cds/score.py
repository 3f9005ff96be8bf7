"""The CDS pipeline over a set of images: crops → tokens → feature maps → top-m images → CDS.

For each image x (in batches), the two shifted crops A and B (`training.cds.cropping`) go
through the patch model to the chosen layer; each feature f gets its maps a_f(x, A) and
a_f(x, B) over the p² patches, and the token norms of both crops are kept. Per feature, a
running buffer keeps the m images of largest total activation on crop A, Σ_i a_f(x, A)_i,
among the images where f has positive mass on the shared patches of *both* crops (elsewhere its
EMD is undefined: the feature is inactive there, and the image is skipped for f). At the end:

- the outlier-token threshold from the histogram of every token norm (`training.cds.outliers`);
- per feature, CDS over its buffered images (`training.cds.emd.contextual_dependency_score`),
  the number of images used (≤ m), and its outlier share over the same images (both crops);
- the scope threshold from the CDS histogram and each feature's scope.

Memory is O(F · m · p²) for the buffers plus O(images · p²) for the norms, whatever the number
of images.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from training.cds.config import CdsConfig
from training.cds.cropping import CropGeometry, shifted_crops
from training.cds.emd import choose_threshold, contextual_dependency_score, scopes
from training.cds.images import ImageSource
from training.cds.outliers import (
    outlier_mask,
    outlier_positions,
    outlier_rule,
    outlier_share,
    token_norms,
)
from training.cds.patches import FeatureSet, PatchModel
from training.cds.result import CdsResult, FeatureScore
from training.core.errors import InputError


class TopImages:
    """Per feature, the m highest-scoring images seen so far and both crops' maps on them."""

    def __init__(self, n_features: int, m: int, n_patches: int) -> None:
        self.m = m
        self.score = np.full((n_features, m), -np.inf, dtype=np.float64)
        self.image = np.full((n_features, m), -1, dtype=np.int64)
        self.maps = np.zeros((n_features, m, 2, n_patches), dtype=np.float32)

    def add(self, images: np.ndarray, scores: np.ndarray, maps: np.ndarray) -> None:
        """Offer a batch: image ids [B], scores [B, F] (−inf = not eligible), maps [B, 2, P, F]."""
        scores_t = scores.T
        rows = np.flatnonzero((scores_t > self.score.min(axis=1, keepdims=True)).any(axis=1))
        if len(rows) == 0:
            return
        batch = len(images)
        score = np.concatenate([self.score[rows], scores_t[rows]], axis=1)
        image = np.concatenate([self.image[rows], np.broadcast_to(images, (len(rows), batch))], 1)
        new_maps = np.moveaxis(maps[..., rows], -1, 0)  # [R, B, 2, P]
        candidates = np.concatenate([self.maps[rows], new_maps], axis=1)
        keep = np.argsort(-score, axis=1, kind="stable")[:, : self.m]
        self.score[rows] = np.take_along_axis(score, keep, axis=1)
        self.image[rows] = np.take_along_axis(image, keep, axis=1)
        self.maps[rows] = np.take_along_axis(candidates, keep[:, :, None, None], axis=1)

    def of(self, feature: int) -> tuple[np.ndarray, np.ndarray]:
        """(image ids [k], maps [k, 2, P]) of one feature's eligible images, best first."""
        valid = np.isfinite(self.score[feature])
        return self.image[feature][valid], self.maps[feature][valid]


def crop_batch(images: Sequence[Any], geometry: CropGeometry) -> list[Any]:
    """[A₀, B₀, A₁, B₁, …]: both shifted crops of each image, in order."""
    return [crop for image in images for crop in shifted_crops(image, geometry)]


def score_features(
    model: PatchModel,
    features: FeatureSet,
    source: ImageSource,
    config: CdsConfig,
    progress: bool = True,
) -> CdsResult:
    """CDS, images used, outlier share and scope of every feature over the images."""
    geometry = CropGeometry(model.grid, model.patch_size, config.shift)
    layer = model.resolve_layer(config.layer)
    n_patches = model.grid**2
    top = TopImages(len(features), config.top_m, n_patches)
    norms: list[np.ndarray] = []
    skipped: list[str] = []
    seconds = {"forward": 0.0, "features": 0.0, "emd": 0.0}
    started = time.perf_counter()
    bar = tqdm(total=len(source), desc="cds: crops and maps", unit="img", disable=not progress)
    for _, images, bad in source.batches(config.batch_size):
        skipped += bad
        bar.update(len(images) + len(bad))
        if not images:
            continue
        tick = time.perf_counter()
        tokens, joint = model.forward(model.pixels(crop_batch(images, geometry)), layer)
        seconds["forward"] += time.perf_counter() - tick
        tick = time.perf_counter()
        batch = len(images)
        acts = features.activations(tokens, joint).cpu().numpy().astype(np.float32, copy=False)
        acts = acts.reshape(batch, 2, n_patches, len(features))
        ids = np.arange(len(norms), len(norms) + batch)
        norms += list(token_norms(tokens.cpu().numpy()).reshape(batch, 2, n_patches))
        mass_a = acts[:, 0][:, geometry.shared_a].sum(axis=1)  # [B, F]
        mass_b = acts[:, 1][:, geometry.shared_b].sum(axis=1)
        score = np.where((mass_a > 0) & (mass_b > 0), acts[:, 0].sum(axis=1), -np.inf)
        top.add(ids, score, acts)
        seconds["features"] += time.perf_counter() - tick
    bar.close()
    if not norms:
        raise InputError("no image could be decoded")

    norm_stack = np.stack(norms)  # [N, 2, P]
    rule = outlier_rule(norm_stack, config.outlier_z, config.outlier_ratio)
    mask = outlier_mask(norm_stack, rule)
    tick = time.perf_counter()
    rows = []
    kinds = features.kinds
    for f in tqdm(range(len(features)), desc="cds: EMD", unit="feat", disable=not progress):
        image_ids, maps = top.of(f)
        cds, used, share = math.nan, 0, math.nan
        if len(image_ids):
            shared_a, shared_b = geometry.shared(maps[:, 0], maps[:, 1])
            cds, used = contextual_dependency_score(shared_a, shared_b, geometry.shared_side)
            share = outlier_share(maps, mask[image_ids])
        kind = kinds[f] if kinds else None
        rows.append(
            FeatureScore(f, features.ids[f], features.names[f], cds, used, share, None, kind)
        )
    seconds["emd"] = time.perf_counter() - tick
    values = np.array([r.cds for r in rows])
    threshold = choose_threshold(values, config.threshold)
    for row, scope in zip(rows, scopes(values, threshold.value), strict=True):
        row.scope = scope
    seconds["total"] = time.perf_counter() - started
    return CdsResult(
        model=model.name,
        feature_kind=features.kind,
        layer=layer,
        geometry=geometry,
        config=config,
        features=rows,
        threshold=threshold,
        outliers=rule,
        positions=outlier_positions(mask, model.grid),
        images=len(norms),
        skipped=skipped,
        seconds=seconds,
    )


def collect_patch_tokens(
    model: PatchModel,
    source: ImageSource,
    config: CdsConfig,
    max_tokens: int = 50_000,
    seed: int = 0,
    progress: bool = True,
) -> np.ndarray:
    """Patch tokens [T, width] of both crops of every image after the chosen layer, at most
    ⌈max_tokens / images⌉ drawn at random from each image (for training an SAE)."""
    geometry = CropGeometry(model.grid, model.patch_size, config.shift)
    layer = model.resolve_layer(config.layer)
    per_image = max(1, math.ceil(max_tokens / max(1, len(source))))
    rng = np.random.default_rng(seed)
    parts = []
    bar = tqdm(total=len(source), desc="cds: tokens for the SAE", unit="img", disable=not progress)
    for _, images, bad in source.batches(config.batch_size):
        bar.update(len(images) + len(bad))
        if not images:
            continue
        tokens, _ = model.forward(model.pixels(crop_batch(images, geometry)), layer)
        rows = tokens.cpu().numpy().reshape(len(images), -1, tokens.shape[-1])
        for image_tokens in rows:
            take = rng.choice(len(image_tokens), min(per_image, len(image_tokens)), replace=False)
            parts.append(image_tokens[np.sort(take)])
    bar.close()
    if not parts:
        raise InputError("no image could be decoded")
    return np.concatenate(parts).astype(np.float32)


def fit_patch_sae(
    tokens: np.ndarray,
    n_latents: int,
    k: int = 8,
    epochs: int = 30,
    seed: int = 0,
    progress: bool = True,
) -> Any:
    """A TopK SAE with `n_latents` latents (a multiple of the token width) on patch tokens,
    trained with `training.sae.train.train_sae` on 90% of them, early-stopped on the rest."""
    from training.sae.config import SaeConfig
    from training.sae.train import train_sae

    width = tokens.shape[1]
    if n_latents < width or n_latents % width:
        raise InputError(
            f"--sae-latents must be a positive multiple of the token width {width}, got {n_latents}"
        )
    if len(tokens) < 20:
        raise InputError(f"too few patch tokens ({len(tokens)}) to train an SAE")
    order = np.random.default_rng(seed).permutation(len(tokens))
    cut = max(2, len(tokens) // 10)
    try:
        config = SaeConfig(
            kind="topk",
            expansion=n_latents // width,
            k=k,
            epochs=epochs,
            patience=3,
            batch_size=min(1024, max(16, len(tokens) // 16)),
            seed=seed,
        )
        with torch.random.fork_rng(devices=[]):
            sae, _ = train_sae(tokens[order[cut:]], tokens[order[:cut]], config, progress)
    except ValueError as error:
        raise InputError(f"cannot train the SAE: {error}") from error
    return sae
