"""CDS's run time per image for a ViT-B-16 image tower on this machine, and the constructed AUC.

Arm 1, the CEDAR-artifact path of `strata eval cds`: the image tower (random weights, seed 0,
on the CPU unless --device says otherwise), a CEDAR-like artifact with a Haar-random rotation
of the joint space (512-d for ViT-B-16) and a complete catalog (1024 signed concepts), CDS of
every concept over the images, and the scopes written back into the artifact. The figure is
seconds per image of the whole scoring (crops, forward passes, maps, top-m buffers, EMDs,
threshold), with its parts; model loading is reported apart. The EMD part grows with the
number of features × m, not with the number of images, so it is also given per EMD.

Baseline, side by side in the same process: open_clip's own `encode_image` on the same two
crops of each image in batches of the same size — the two forward passes any crop-pair method
pays at least. The figure to read is the ratio of CDS's scoring time to it (absolute seconds
wander on a shared machine).

Arm 2, the constructed model (`training.cds.constructed`): ROC AUC of CDS for its global
(context + register) channels against its local ones, the outlier share of the global
channels, and the scope accuracy of each threshold rule, on synthetic images and on the
photographs, in the plain variant (local channels depend on their own pixels only) and a harder
one (a positional embedding in every channel, context channels mixed up to 90% with a
content-following map).

    python -m benchmarks.training.cds_runtime     (--images: the data folder's coco-mini/)
"""

from __future__ import annotations

import argparse
import math
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness import publish
from training.cds.config import CdsConfig
from training.cds.constructed import ConstructedViT, synthetic_images
from training.cds.cropping import CropGeometry, shifted_crops
from training.cds.images import ImageSource
from training.cds.patches import OpenClipPatches, concept_features
from training.cds.report import write_scopes
from training.cds.result import CdsResult
from training.cds.score import score_features
from training.core.encoders import load_encoder
from training.core.settings import load_settings
from training.synthetic import random_cedar_artifact

VARIANTS = {
    "plain": {},
    "hard": {"position_strength": 0.3, "content_mix": 0.9},
}


def constructed_figures(result: CdsResult) -> dict[str, Any]:
    truth = result.ground_truth() or {}
    by_kind = truth.get("by_kind", {})
    return {
        "auc": truth.get("auc"),
        "outlier_share_of_global": by_kind.get("global", {}).get("mean_outlier_share"),
        "outlier_share_of_register": by_kind.get("register", {}).get("mean_outlier_share"),
        "outlier_share_of_context": by_kind.get("context", {}).get("mean_outlier_share"),
        "outlier_share_of_local": by_kind.get("local", {}).get("mean_outlier_share"),
        "mean_cds": {k: v["mean_cds"] for k, v in by_kind.items()},
        "threshold": result.threshold.to_json(),
        "scope_accuracy": truth.get("accuracy_of_scope"),
        "scope_accuracy_by_rule": {
            rule: v["accuracy"] for rule, v in truth.get("accuracy_by_rule", {}).items()
        },
        "outlier_tokens": result.outliers.outliers,
        "outlier_positions": result.positions,
        "images": result.images,
        "seconds_per_image": result.seconds_per_image,
    }


def encode_image_seconds(
    encoder: Any, photos: ImageSource, geometry: CropGeometry, batch_size: int
) -> float:
    """Seconds of open_clip's `encode_image` over both shifted crops of every image."""
    started = time.perf_counter()
    for _, images, _ in photos.batches(batch_size):
        crops = [crop for image in images for crop in shifted_crops(image, geometry)]
        pixels = torch.stack([encoder.preprocess(crop) for crop in crops]).to(encoder.device)
        with torch.inference_mode():
            encoder.model.encode_image(pixels)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=Path, default=load_settings().data_dir / "coco-mini")
    parser.add_argument("--encoder", default="open_clip:ViT-B-16")
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--top-m", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--synthetic", type=int, default=48)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--work", type=Path, default=Path("runs/bench/cds-runtime"))
    parser.add_argument("--json", type=Path, default=Path("runs/bench/cds_runtime.json"))
    args = parser.parse_args(argv)
    if not args.images.is_dir():
        print(f"skipped: {args.images} not found (the photographs this benchmark times)")
        sys.exit(0)
    photos = ImageSource.from_folder(args.images, args.limit)
    config = CdsConfig(top_m=args.top_m, batch_size=args.batch_size)

    started = time.perf_counter()
    encoder = load_encoder(args.encoder, device=args.device)
    model = OpenClipPatches.from_encoder(encoder)
    load_seconds = time.perf_counter() - started
    artifact = random_cedar_artifact(model.embed_dim, seed=1, encoder=encoder.id)
    artifact_path = args.work / "cedar-random"
    shutil.rmtree(artifact_path, ignore_errors=True)
    artifact.save(artifact_path)
    features = concept_features(artifact, model.embed_dim)
    geometry = CropGeometry(model.grid, model.patch_size, config.shift)
    baseline = encode_image_seconds(encoder, photos, geometry, config.batch_size)
    result = score_features(model, features, photos, config, progress=True)
    baseline = (baseline + encode_image_seconds(encoder, photos, geometry, config.batch_size)) / 2
    tick = time.perf_counter()
    write_scopes(artifact_path, result, artifact, {"benchmark": "cds_runtime"})
    write_seconds = time.perf_counter() - tick
    emds = sum(f.images for f in result.features)
    summary = result.summary()

    constructed: dict[str, Any] = {}
    synthetic = ImageSource.from_images(synthetic_images(args.synthetic, seed=0), "synthetic")
    for name, options in VARIANTS.items():
        toy = ConstructedViT(**options)
        for label, source in (("synthetic", synthetic), ("photos", photos)):
            scored = score_features(toy, toy.features(), source, config, progress=False)
            constructed[f"{name}/{label}"] = constructed_figures(scored)

    figures = {
        "benchmark": "cds_runtime",
        "machine": {
            "platform": platform.platform(),
            "torch_threads": torch.get_num_threads(),
            "device": args.device,
        },
        "vit": {
            "encoder": encoder.id,
            "images": result.images,
            "images_folder": str(args.images),
            "layer": result.layer,
            "grid": model.grid,
            "patch": model.patch_size,
            "features": len(result.features),
            "top_m": config.top_m,
            "shift": config.shift,
            "seconds_per_image": result.seconds_per_image,
            "seconds": {
                **result.seconds,
                "load_model": load_seconds,
                "write_scopes": write_seconds,
            },
            "forward_seconds_per_image": result.seconds["forward"] / result.images,
            "encode_image_seconds_per_image": baseline / result.images,
            "cds_over_encode_image": result.seconds["total"] / baseline,
            "forward_over_encode_image": result.seconds["forward"] / baseline,
            "emds": emds,
            "milliseconds_per_emd": 1e3 * result.seconds["emd"] / emds if emds else math.nan,
            "threshold": summary["threshold"],
            "scopes": summary["scopes"],
            "outlier_tokens": summary["outlier_tokens"]["outliers"],
            "cds": summary["cds"],
        },
        "constructed": constructed,
    }
    return publish(figures, args.json)


if __name__ == "__main__":
    main()
