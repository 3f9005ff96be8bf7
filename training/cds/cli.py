"""`strata eval cds` (registered by `training.cli`): the contextual dependency score of features.

The features are a CEDAR artifact's concepts read off the per-patch joint embeddings
(`--artifact`; their scopes are then written into the artifact's catalog), the latents of a
TopK SAE trained here on the patch tokens (`--sae-latents N`), or, with `--constructed`, the
channels of the constructed model whose scopes are known (the summary then has the ROC AUC).
Bad input is an `InputError`: one line, exit 2.

    strata eval cds --images data/coco-mini --encoder open_clip:ViT-B-16 \\
        --artifact runs/cedar-clip --out runs/cds
    strata eval cds --constructed --out runs/cds-constructed
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from tqdm.contrib.logging import logging_redirect_tqdm

from training.cds.config import CdsConfig
from training.cds.constructed import ConstructedViT, synthetic_images
from training.cds.cropping import CropGeometry
from training.cds.images import ImageSource
from training.cds.patches import (
    FeatureSet,
    OpenClipPatches,
    PatchModel,
    concept_features,
    sae_features,
)
from training.cds.report import plot_histogram, write_scopes, write_summary, write_table
from training.cds.result import CdsResult
from training.cds.score import collect_patch_tokens, fit_patch_sae, score_features
from training.core.artifacts import TransformArtifact
from training.core.config import build_config
from training.core.encoders import load_encoder
from training.core.errors import InputError
from training.core.settings import load_settings

log = logging.getLogger(__name__)


def eval_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="report folder")],
    images: Annotated[
        Path | None,
        typer.Option(help="folder of images (searched recursively), e.g. the coco-mini folder"),
    ] = None,
    encoder: Annotated[
        str, typer.Option("--encoder", "-e", help="open_clip:<ViT arch>[@weights] | …/x.json")
    ] = "open_clip:ViT-B-16",
    layer: Annotated[
        int | None,
        typer.Option(help="tokens after this many blocks (0..L, or -1 for the last; default L)"),
    ] = None,
    artifact: Annotated[
        Path | None,
        typer.Option(help="CEDAR artifact: score its concepts and write their scopes into it"),
    ] = None,
    sae_latents: Annotated[
        int | None,
        typer.Option(help="train a TopK SAE with N latents (a multiple of the token width)"),
    ] = None,
    sae_k: Annotated[int, typer.Option(help="SAE: active latents per token")] = 8,
    sae_epochs: Annotated[int, typer.Option(help="SAE: training epochs (early-stopped)")] = 20,
    sae_tokens: Annotated[
        int, typer.Option(help="SAE: patch tokens to train on, at most")
    ] = 50_000,
    top_m: Annotated[int, typer.Option(help="images per feature (its top-m activating)")] = 10,
    shift: Annotated[int, typer.Option(help="shift s between the two crops, in patches")] = 1,
    threshold: Annotated[
        str,
        typer.Option(
            help="scope threshold: auto (Otsu if bimodal, else median) | otsu | "
            "median | gmm | a number"
        ),
    ] = "auto",
    constructed: Annotated[
        bool, typer.Option(help="score the constructed model (scopes known) instead of open_clip")
    ] = False,
    synthetic: Annotated[
        int, typer.Option(help="--constructed without --images: synthetic images to draw")
    ] = 48,
    limit: Annotated[int | None, typer.Option(help="use the first N images only")] = None,
    batch_size: Annotated[int, typer.Option(help="images per forward batch")] = 8,
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda")] = None,
    write_scope: Annotated[
        bool, typer.Option(help="write the scopes into the --artifact's catalog")
    ] = True,
    seed: Annotated[int, typer.Option(help="seed of the SAE, constructed model, images")] = 0,
    progress: Annotated[bool, typer.Option(help="show progress bars")] = True,
) -> None:
    """Contextual dependency score (local vs global scope) of each feature over the images.

    Writes features.csv/.json/.md, cds_histogram.png and summary.json under OUT; with
    --artifact, each concept's scope also goes into the artifact's catalog.
    """
    if artifact is not None and sae_latents is not None:
        raise InputError("give --artifact or --sae-latents, not both")
    if artifact is None and sae_latents is None and not constructed:
        raise InputError("say which features to score: --artifact, --sae-latents, or --constructed")
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be >= 1, got {limit}")
    flags = {
        "top_m": top_m,
        "shift": shift,
        "layer": layer,
        "threshold": threshold,
        "batch_size": batch_size,
    }
    config = build_config(CdsConfig, flags, "strata eval cds")
    if images is not None:
        source = ImageSource.from_folder(images, limit)
    elif constructed:
        if synthetic < 1:
            raise InputError(f"--synthetic must be >= 1, got {synthetic}")
        source = ImageSource.from_images(synthetic_images(synthetic, seed=seed), "synthetic")
    else:
        raise InputError("--images is required (a folder of images)")
    scored_artifact = TransformArtifact.load(artifact) if artifact is not None else None

    model = open_model(encoder, constructed, device, seed)
    CropGeometry(model.grid, model.patch_size, config.shift)  # refuse a bad shift before work
    resolved_layer = model.resolve_layer(config.layer)
    with logging_redirect_tqdm():
        features = choose_features(
            model,
            source,
            config,
            scored_artifact,
            sae_latents,
            sae_k,
            sae_epochs,
            sae_tokens,
            seed,
            progress,
        )
        result = score_features(model, features, source, config, progress=progress)
    out.mkdir(parents=True, exist_ok=True)
    write_table(result, out)
    plot_histogram(result, out / "cds_histogram.png")
    summary = result.summary()
    summary["images_folder"] = str(images) if images is not None else f"synthetic ({synthetic})"
    if scored_artifact is not None and artifact is not None:
        summary["artifact"] = str(artifact)
        if scored_artifact.encoder and scored_artifact.encoder != model.name:
            log.warning(
                "the artifact was trained on %s embeddings, scored here with %s",
                scored_artifact.encoder,
                model.name,
            )
        if write_scope:
            write_scopes(artifact, result, scored_artifact, provenance(result, images))
            summary["scopes_written_to"] = str(artifact)
    write_summary(summary, out / "summary.json")
    typer.echo(format_result(result, out, summary, resolved_layer))


def open_model(spec: str, constructed: bool, device: str | None, seed: int) -> PatchModel:
    """The constructed model, or the open_clip ViT image tower the encoder spec names."""
    if constructed:
        return ConstructedViT(seed=seed)
    encoder = load_encoder(spec, device=device or load_settings().device)
    return OpenClipPatches.from_encoder(encoder)


def choose_features(
    model: PatchModel,
    source: ImageSource,
    config: CdsConfig,
    artifact: TransformArtifact | None,
    sae_latents: int | None,
    sae_k: int,
    sae_epochs: int,
    sae_tokens: int,
    seed: int,
    progress: bool,
) -> FeatureSet:
    if artifact is not None:
        return concept_features(artifact, model.embed_dim)
    if sae_latents is not None:
        if sae_latents < 1 or sae_k < 1 or sae_k > sae_latents or sae_epochs < 1:
            raise InputError("--sae-latents, --sae-k (<= latents) and --sae-epochs must be >= 1")
        if sae_latents % model.width:
            raise InputError(
                f"--sae-latents must be a multiple of the token width {model.width}, "
                f"got {sae_latents}"
            )
        tokens = collect_patch_tokens(model, source, config, sae_tokens, seed, progress)
        sae = fit_patch_sae(tokens, sae_latents, sae_k, sae_epochs, seed, progress)
        return sae_features(sae, sae_k)
    if not isinstance(model, ConstructedViT):
        raise InputError("only the constructed model has features of its own; give --artifact")
    return model.features()


def provenance(result: CdsResult, images: Path | None) -> dict[str, Any]:
    """What goes into the artifact's metrics["cds"]: how the scopes were measured."""
    return {
        "model": result.model,
        "layer": result.layer,
        "images": result.images,
        "images_folder": str(images) if images is not None else None,
        "top_m": result.config.top_m,
        "shift": result.geometry.shift,
        "threshold": result.threshold.to_json(),
        "scopes": result.summary()["scopes"],
        "outlier_tokens": result.outliers.to_json(),
    }


def format_result(result: CdsResult, out: Path, summary: dict[str, Any], layer: int) -> str:
    threshold = result.threshold
    scopes = summary["scopes"]
    outliers = result.outliers
    lines = [
        f"model        {result.model}, layer {layer}, {result.images} images "
        f"({len(result.skipped)} skipped)",
        f"features     {len(result.features)} {result.feature_kind}, "
        f"{summary['features']['scored']} scored",
        f"threshold    {threshold.value:.4f} ({threshold.rule}: {threshold.reason})",
        f"scopes       {scopes['local']} local, {scopes['global']} global",
        f"outliers     {outliers.outliers} of {outliers.tokens} tokens above norm "
        f"{outliers.threshold:.3g} (median {outliers.median:.3g})",
        f"time         {result.seconds['total']:.1f} s, {result.seconds_per_image:.3f} s/image",
    ]
    truth = summary.get("ground_truth")
    if truth:
        share = truth["by_kind"]["global"]["mean_outlier_share"]
        lines.append(
            f"truth        AUC {truth['auc']:.4f}, "
            f"scope accuracy {truth['accuracy_of_scope']:.4f}, "
            f"global features' outlier share {share if share is None else round(share, 4)}"
        )
    if "scopes_written_to" in summary:
        lines.append(f"artifact     scopes written to {summary['scopes_written_to']}")
    lines.append(
        f"wrote        {out}/features.csv, features.json, features.md, cds_histogram.png, "
        "summary.json"
    )
    return "\n".join(lines)
