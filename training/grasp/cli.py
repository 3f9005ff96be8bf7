"""`strata train grasp` and `strata eval grasp`."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer
from tqdm.contrib.logging import logging_redirect_tqdm

from training.core.artifacts import TransformArtifact
from training.core.cache import EmbeddingCache
from training.core.commands import SeedOption
from training.core.config import build_config, load_config
from training.core.errors import InputError
from training.core.granularity import Contract, default_contract
from training.core.settings import load_settings
from training.grasp.adapters import ADAPTERS, fit_adapter
from training.grasp.agreement import agreement, read_expert_judgments
from training.grasp.baselines import BASELINES, GALLERY_BASELINES, baseline_artifact
from training.grasp.config import GALLERY_RECIPE, GraspConfig
from training.grasp.evaluate import (
    Transform,
    agreement_table,
    evaluate,
    markdown_table,
    plot_hn_curves,
)
from training.grasp.fit import fit_grasp, grasp_set
from training.grasp.gallery import gallery_retrieval, gallery_table, plot_gallery_curves

log = logging.getLogger(__name__)
DEFAULT_BASELINES = "identity,pca,random,mrl,mlp"

CacheOption = Annotated[Path, typer.Option("--cache", help="embedding cache with view metadata")]
EncoderOption = Annotated[
    str | None, typer.Option("--encoder", help="default: the encoder recorded in the cache")
]


def train_command(
    cache: CacheOption,
    out: Annotated[Path, typer.Option("--out", "-o", help="artifact folder to write")],
    config: Annotated[
        Path | None,
        typer.Option(
            help="GraspConfig as JSON (weights, epochs, ...); default: the defaults, "
            "or with --gallery the gallery recipe"
        ),
    ] = None,
    epochs: Annotated[int | None, typer.Option(help="override the config's epochs")] = None,
    seed: SeedOption = None,
    validation_split: Annotated[
        str | None, typer.Option(help="override the config's validation split (Flickr8k: dev)")
    ] = None,
    work: Annotated[Path | None, typer.Option(help="checkpoint folder (default: OUT.work)")] = None,
    views: Annotated[
        Path | None, typer.Option(help="embedded views file to reuse or write")
    ] = None,
    encoder: EncoderOption = None,
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda")] = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing artifact")] = False,
    progress: Annotated[bool, typer.Option(help="show progress bars")] = True,
    gallery: Annotated[
        Path | None,
        typer.Option(help="cache of the gallery to be indexed: fit the rotation to it"),
    ] = None,
    gallery_split: Annotated[
        str, typer.Option(help="the gallery cache's split to fit (default all rows)")
    ] = "all",
) -> None:
    """Learn the GraSP-VL rotation from a cache with views; resumes from its checkpoint."""
    settings = load_settings()
    overrides = {"epochs": epochs, "seed": seed, "validation_split": validation_split}
    if config is None and gallery is not None:  # with a gallery and no config: the gallery recipe
        given = {name: value for name, value in overrides.items() if value is not None}
        recipe = GALLERY_RECIPE.model_dump() | given
        grasp_config = build_config(GraspConfig, recipe, "the gallery recipe")
    else:
        grasp_config = load_config(GraspConfig, config, **overrides)
    if out.exists() and not overwrite:
        raise InputError(f"{out} exists; pass --overwrite to replace it")
    with logging_redirect_tqdm():
        result = fit_grasp(
            cache,
            out,
            grasp_config,
            work=work,
            views=views,
            encoder=encoder,
            device=device or settings.device,
            overwrite=overwrite,
            progress=progress,
            gallery=gallery,
            gallery_split=gallery_split,
        )
    best = result.artifact.metrics["validation"]
    typer.echo(
        f"artifact     {out}\n"
        f"epochs       {result.epochs_run} run, best {result.best_epoch} (validation "
        f"selectivity {best['val_selectivity']:.4f}, staircase {best['val_staircase']:.2f}"
        + (f", retrieval AP {best['val_retrieval_ap']:.4f}" if "val_retrieval_ap" in best else "")
        + ")\n"
        f"time         {result.seconds:.1f} s"
    )


def eval_command(
    cache: CacheOption,
    out: Annotated[Path, typer.Option("--out", "-o", help="report folder")],
    artifact: Annotated[list[Path] | None, typer.Option(help="artifact(s) to score")] = None,
    baselines: Annotated[
        str | None,
        typer.Option(
            help=f"comma list of {', '.join((*BASELINES, *GALLERY_BASELINES, *ADAPTERS))} "
            f"(default {DEFAULT_BASELINES}, and with --gallery {', '.join(GALLERY_BASELINES)})"
        ),
    ] = None,
    split: Annotated[str, typer.Option(help="split to score on")] = "test",
    views: Annotated[
        Path | None, typer.Option(help="embedded views file to reuse or write")
    ] = None,
    encoder: EncoderOption = None,
    judgments: Annotated[
        Path | None,
        typer.Option(help="Flickr8k ExpertAnnotations.txt (default: beside a Flickr8k corpus)"),
    ] = None,
    gallery: Annotated[
        Path | None,
        typer.Option(
            help="held-out gallery cache (captions grouped by image): granularity retrieval "
            "and the hard negatives are scored on it"
        ),
    ] = None,
    gallery_split: Annotated[str, typer.Option(help="the gallery cache's split")] = "test",
    seed: SeedOption = None,
) -> None:
    """Every GraSP metric for artifacts and baselines on one labelled set: JSON, Markdown, PNG.

    `--seed` seeds what the baselines draw (the adapters' training, the random rotation)."""
    from training.grasp.fitting import gallery_rows, retrieval_task_of

    data, spec = grasp_set(cache, encoder, views)
    train = data.of_split("train")
    if gallery is None:
        test = data.of_split(split)
    else:  # the hard negatives of the gallery's own captions
        test = grasp_set(gallery, spec, None)[0].of_split(gallery_split)
    dim = data.anchors.shape[1]
    contract = default_contract(dim)
    transforms: dict[str, tuple[Transform, Contract]] = {}
    if baselines is None:
        baselines = DEFAULT_BASELINES + ("," + ",".join(GALLERY_BASELINES) if gallery else "")
    names = [b.strip() for b in baselines.split(",") if b.strip()]
    known = (*BASELINES, *GALLERY_BASELINES, *ADAPTERS)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(
            f"unknown baseline(s) {', '.join(unknown)}; choose from {', '.join(known)}"
        )
    rows = gallery_rows(gallery, gallery_split) if gallery else None
    for name in names:
        if name in ADAPTERS:
            log.info("fitting the %s adapter on %d train rows", name, len(train))
            adapter_config = GraspConfig(seed=seed or 0)
            transforms[name] = (fit_adapter(name, train, contract, adapter_config), contract)
        else:
            fitted = baseline_artifact(name, train, contract, spec, seed or 0, gallery=rows)
            transforms[name] = (fitted.apply, contract)
    for path in artifact or []:
        loaded = TransformArtifact.load(path)
        if loaded.dim != dim:
            raise InputError(f"{path} is {loaded.dim}-d but the cache is {dim}-d")
        transforms[path.name] = (loaded.apply, loaded.contract)
    if not transforms:
        raise InputError("nothing to evaluate: give --artifact or --baselines")
    reports = {name: evaluate(f, test, c) for name, (f, c) in transforms.items()}
    retrieval: dict[str, dict] = {}
    if gallery is not None:
        task = retrieval_task_of(gallery, gallery_split, spec)
        log.info(
            "granularity retrieval on %s (%s): %s queries", gallery, gallery_split, task.counts()
        )
        for name, (f, c) in transforms.items():
            retrieval[name] = gallery_retrieval(f, task.pairs(), task.rows, c)
    judgments = judgments or _flickr_judgments(cache)
    if judgments is not None:
        expert = read_expert_judgments(judgments)
        opened = EmbeddingCache.open(cache)
        metadata = opened.metadata()
        ids, groups = metadata.column("id").to_pylist(), metadata.column("group").to_pylist()
        vectors = opened.embeddings("text")
        for name, (f, c) in transforms.items():
            lengths = sorted(set(c.values()))
            reports[name]["agreement"] = agreement(f, expert, vectors, ids, groups, lengths)
    out.mkdir(parents=True, exist_ok=True)
    scored = f"{gallery} ({gallery_split})" if gallery else split
    (out / "report.json").write_text(
        json.dumps({"split": scored, "methods": reports, "gallery": retrieval}, indent=2)
    )
    table = markdown_table(reports)
    if retrieval:
        table = gallery_table(retrieval, contract) + "\nHard negatives:\n\n" + table
        plot_gallery_curves(retrieval, contract, out / "gallery_ap.png")
    if judgments is not None:
        table += "\nAgreement with the Flickr8k expert judgments (Spearman / NDCG@10):\n\n"
        table += agreement_table(reports)
    (out / "report.md").write_text(f"# GraSP-VL evaluation ({scored}, {len(test)} rows)\n\n{table}")
    named = f"{gallery.name} {gallery_split}" if gallery else split  # a title, not a path
    plot_hn_curves(reports, out / "hn_curves.png", split=named)
    plots = "hn_curves.png" + (", gallery_ap.png" if retrieval else "")
    typer.echo(table + f"\nwrote {out}/report.json, report.md, {plots}")


def _flickr_judgments(cache_dir: Path) -> Path | None:
    """ExpertAnnotations.txt beside the Flickr8k corpus a cache was embedded from, if any."""
    corpus = EmbeddingCache.open(cache_dir).manifest.job.get("corpus", {})
    if corpus.get("kind") != "flickr8k":
        return None
    path = Path(corpus["path"]) / "ExpertAnnotations.txt"
    return path if path.is_file() else None
