"""`strata train cedar` and `strata eval cedar`."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
import typer
from tqdm.contrib.logging import logging_redirect_tqdm

from training.cedar.caption_words import caption_vocabulary
from training.cedar.catalog import name_directions
from training.cedar.concepts import ConceptCoder
from training.cedar.data import SplitRows, load_split_rows
from training.cedar.evaluate import (
    KS,
    LabelledTask,
    SparseMethod,
    evaluate_method,
    factor_rows,
    frequent_concepts_markdown,
    markdown_report,
    plot_fvu_curves,
    rotation_method,
    sae_method,
)
from training.cedar.fit import (
    CedarFitConfig,
    fit_cedar,
    method_names,
    naming_rows,
    vocabulary_embeddings,
)
from training.cedar.gallery_quality import (
    embed_words,
    filter_quality_markdown,
    gallery_quality,
)
from training.cedar.readout.quality import readout_variants
from training.cedar.readout.vocabulary import (
    ReadoutConfig,
)
from training.cedar.train import CedarConfig
from training.core.artifacts import TransformArtifact
from training.core.cache import EmbeddingCache
from training.core.commands import SeedOption
from training.core.config import load_config
from training.core.errors import InputError
from training.core.files import atomic_write_bytes
from training.core.rotations import pca_rotation, random_rotation
from training.core.settings import load_settings
from training.probes import encode_labels, fit_linear_probe
from training.sae.base import SparseAutoencoder
from training.sae.config import SaeConfig
from training.sae.registry import SAE_KINDS, make_sae
from training.sae.train import train_sae
from training.views.extractor import extract_views

log = logging.getLogger(__name__)
ROTATION_BASELINES = ("identity", "pca", "random")
PROBE_CLASSES = 20

CacheOption = Annotated[Path, typer.Option("--cache", help="embedding cache to learn from")]
EncoderOption = Annotated[
    str | None,
    typer.Option("--encoder", help="encoder for the vocabulary (default: the cache's)"),
]
VocabularyOption = Annotated[
    Path | None,
    typer.Option(help="one term per line (default: nouns, adjectives, verbs of the captions)"),
]


def train_command(
    cache: CacheOption,
    out: Annotated[Path, typer.Option("--out", "-o", help="artifact folder to write")],
    config: Annotated[Path | None, typer.Option(help="CedarConfig as JSON")] = None,
    k: Annotated[
        int | None,
        typer.Option(
            "--sparsity", help="active concepts per row, k (default: the config's)", min=1
        ),
    ] = None,
    epochs: Annotated[int | None, typer.Option(help="override the config's epochs", min=1)] = None,
    seed: SeedOption = None,
    vocabulary: VocabularyOption = None,
    encoder: EncoderOption = None,
    work: Annotated[Path | None, typer.Option(help="checkpoint folder (default: OUT.work)")] = None,
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda")] = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing artifact")] = False,
    name_threshold: Annotated[
        float | None,
        typer.Option(
            help="val precision a name must reach to be kept (default: picked on the val rows)"
        ),
    ] = None,
    readout: Annotated[
        Path | None,
        typer.Option(help="ReadoutConfig as JSON for the vocabulary readout (default: defaults)"),
    ] = None,
    no_readout: Annotated[
        bool, typer.Option("--no-readout", help="no vocabulary readout (axes alone)")
    ] = False,
    progress: Annotated[bool, typer.Option(help="show progress bars")] = True,
) -> None:
    """Learn the CEDAR rotation, name its concepts, learn the vocabulary readout (a named
    concept per word, where the cache has captions), and write the artifact with its catalog."""
    if name_threshold is not None and not 0.0 <= name_threshold <= 1.0:
        raise InputError(f"--name-threshold must lie in [0, 1], got {name_threshold}")
    cedar_config = load_config(CedarConfig, config, k=k, epochs=epochs, seed=seed)
    readout_config = None if no_readout else load_config(ReadoutConfig, readout, seed=seed)
    if out.exists() and not overwrite:
        raise InputError(f"{out} exists; pass --overwrite to replace it")
    if encoder is None and EmbeddingCache.open(cache).manifest.encoder is None:
        raise InputError(  # checked now: the vocabulary is embedded after training
            f"the cache {cache} records no encoder: pass --encoder (the model it was embedded "
            "with) to embed the concept vocabulary"
        )
    with logging_redirect_tqdm():
        fitted = fit_cedar(
            CedarFitConfig(
                cache=cache,
                out=out,
                cedar=cedar_config,
                readout=readout_config,
                vocabulary=vocabulary,
                encoder=encoder,
                name_threshold=name_threshold,
                work=work,
                device=device or load_settings().device,
                overwrite=overwrite,
                progress=progress,
            )
        )
    result, catalog, vocab_info = fitted.result, fitted.catalog, fitted.vocabulary
    best = result.history[result.best_epoch - 1]
    top = sorted(catalog, key=lambda e: -e.frequency)[:8]
    named = f"{sum(e.named for e in catalog)} of {len(catalog)} concepts"
    if "threshold" in fitted.naming:
        named += f" (val precision >= {fitted.naming['threshold']})"
    typer.echo(
        f"artifact     {out}\n"
        f"epochs       {result.epochs_run} run, best {result.best_epoch} "
        f"(validation FVU at k={cedar_config.k}: {best[f'val_fvu_k{cedar_config.k}']:.4f})\n"
        f"time         {result.seconds:.1f} s\n"
        f"vocabulary   {vocab_info['size']} terms\n"
        f"named        {named}\n"
        f"frequent     " + ", ".join(f"{e.name} ({e.label})" for e in top)
    )
    if fitted.readout is not None:
        info = fitted.readout.info
        typer.echo(
            f"readout      {info['words']} word concepts ({info['own_thresholds']} with their "
            f"own threshold), {info['epochs_run']} epochs, best {info['best_epoch']}; held-out "
            f"precision {info['precision']:.3f}, recall {info['recall']:.3f} (mean over words)"
            + (
                f"; {info['zero_shot_words']} zero-shot words "
                f"(cosine ≥ {info['zero_shot_cut']:.3f})"
                if info.get("zero_shot_words")
                else ""
            )
        )


def trained_sae(
    config: SaeConfig, train: np.ndarray, val: np.ndarray, folder: Path, progress: bool
) -> tuple[SparseAutoencoder, float]:
    """Train an SAE baseline, or reuse the one trained earlier with this config on these rows
    (kept in `folder`, keyed by both), with the training time it took then."""
    key = hashlib.sha256(
        repr(config.model_dump()).encode() + train.tobytes() + val.tobytes()
    ).hexdigest()[:16]
    path = folder / f"{config.kind}-{key}.pt"
    dim = train.shape[1]
    if path.is_file():
        saved = torch.load(path, weights_only=True)
        model = make_sae(config.kind, dim, config.expansion * dim, config.k, config.seed)
        model.load_state_dict(saved["state"])
        log.info("reusing the %s SAE trained earlier (%s)", config.kind, path)
        return model, float(saved["seconds"])
    log.info("training the %s SAE (%d latents)", config.kind, config.expansion * dim)
    started = time.perf_counter()
    with logging_redirect_tqdm():
        model, _ = train_sae(train, val, config, progress=progress)
    seconds = time.perf_counter() - started
    buffer = io.BytesIO()
    torch.save({"state": model.state_dict(), "seconds": seconds}, buffer)
    atomic_write_bytes(path, buffer.getvalue())
    return model, seconds


def labelled_tasks(data: SplitRows, train: np.ndarray, test: np.ndarray) -> list[LabelledTask]:
    """Linear-probe tasks: the compositional subject and its attribute where the rows carry
    them, else the object view of each caption (the extractor's head noun), top 20 classes."""
    columns = data.metadata.column_names
    labels: dict[str, np.ndarray] = {}
    for column in ("subject", "subject_attribute"):
        if column in columns:
            labels[column] = np.array(data.metadata.column(column).to_pylist(), dtype=object)
    if not labels:
        objects = [extract_views(t).object or "" for t in data.texts(np.arange(len(data.split)))]
        labels["object"] = np.array(objects, dtype=object)
    tasks = []
    for name, values in labels.items():
        common = [c for c, _ in Counter(values[train].tolist()).most_common() if c][:PROBE_CLASSES]
        y_train, classes = encode_labels(values[train], common)
        keep = y_train >= 0
        probe = fit_linear_probe(data.embeddings[train][keep], y_train[keep], classes)
        tasks.append(LabelledTask(name, probe, encode_labels(values[test], classes)[0]))
    return tasks


def eval_command(
    cache: CacheOption,
    out: Annotated[Path, typer.Option("--out", "-o", help="report folder")],
    artifact: Annotated[Path | None, typer.Option(help="the CEDAR artifact to score")] = None,
    baselines: Annotated[
        str, typer.Option(help=f"comma list of {', '.join((*ROTATION_BASELINES, *SAE_KINDS))}")
    ] = ",".join((*ROTATION_BASELINES, *SAE_KINDS)),
    sae_epochs: Annotated[int, typer.Option(help="epoch budget of every SAE")] = 30,
    seed: SeedOption = None,
    ks: Annotated[str, typer.Option(help="comma list of K")] = ",".join(map(str, KS)),
    vocabulary: VocabularyOption = None,
    encoder: EncoderOption = None,
    gallery: Annotated[
        Path | None,
        typer.Option(
            help="held-out gallery cache (captions grouped by image, with a split): "
            "concept-filter quality on its test rows"
        ),
    ] = None,
    progress: Annotated[bool, typer.Option(help="show progress bars")] = True,
) -> None:
    """FVU against K, CKNNA, linear probes and concept purity for CEDAR and its baselines;
    with --gallery, concept-filter quality and naming precision on the gallery's test rows.
    The SAE baselines train from --seed (default the artifact's seed, else 0); a cache without
    a split column is split by the artifact's seed, so its test rows are the ones CEDAR held out."""
    names = [b.strip() for b in baselines.split(",") if b.strip()]
    unknown = [n for n in names if n not in (*ROTATION_BASELINES, *SAE_KINDS)]
    if unknown:
        known = ", ".join((*ROTATION_BASELINES, *SAE_KINDS))
        raise InputError(f"unknown baseline(s) {', '.join(unknown)}; choose from {known}")
    try:
        k_list = sorted({int(k) for k in ks.split(",") if k.strip()})
    except ValueError as exc:
        raise InputError(f"--ks must be a comma list of integers, got {ks!r}") from exc
    if not k_list or k_list[0] < 1:
        raise InputError(f"--ks must hold positive integers, got {ks!r}")
    cedar = TransformArtifact.load(artifact) if artifact else None
    cedar_config = CedarConfig.model_validate(cedar.config) if cedar else CedarConfig()
    data = load_split_rows(cache, seed=cedar_config.seed)
    x = data.embeddings
    train, val, test = data.rows("train"), data.rows("val"), data.rows("test")
    dim = x.shape[1]
    if cedar is not None and (cedar.method != "cedar" or cedar.dim != dim):
        raise InputError(
            f"{artifact} is a {cedar.dim}-d {cedar.method} artifact, not {dim}-d CEDAR"
        )
    k_default = int(cedar.extra.get("k", 32)) if cedar else 32
    methods: list[SparseMethod] = []
    if cedar is not None:
        methods.append(rotation_method("cedar", cedar.rotation, cedar.mean))
    mean = x[train].mean(axis=0)
    for name in names:
        if name == "identity":
            methods.append(rotation_method(name, np.eye(dim), mean))
        elif name == "pca":
            methods.append(rotation_method(name, pca_rotation(x[train] - mean), mean))
        elif name == "random":
            methods.append(rotation_method(name, random_rotation(dim), mean))
        else:
            sae_config = SaeConfig(
                kind=name,
                k=k_default,
                k_range=(cedar_config.k_min, cedar_config.k_max),
                epochs=sae_epochs,
                seed=cedar_config.seed if seed is None else seed,
            )
            model, seconds = trained_sae(
                sae_config, x[train], x[val], out / "saes", progress=progress
            )
            methods.append(sae_method(f"{name}-sae", model, seconds))
    if not methods:
        raise InputError("nothing to evaluate: give --artifact or --baselines")
    tasks = labelled_tasks(data, train, test)
    factors = factor_rows(data.metadata.take(test)) or None
    vocab = None
    if factors:
        words, word_embeddings, _ = vocabulary_embeddings(data, train, vocabulary, encoder)
        vocab = (words, word_embeddings, mean)
    sample = np.random.default_rng(0).permutation(len(test))[:2000]
    report: dict[str, Any] = {
        "dataset": str(cache),
        "test_rows": len(test),
        "k": k_default,
        "ks": k_list,
        "factors": len(factors) if factors else 0,
        "lp_reference": {
            t.name: t.probe.cross_entropy(
                x[test][t.test_labels >= 0], t.test_labels[t.test_labels >= 0]
            )
            for t in tasks
        },
        "methods": {},
    }
    for method in methods:
        log.info("evaluating %s", method.name)
        report["methods"][method.name] = evaluate_method(
            method, x[test], k_list, tasks, sample, factors, vocab, purity_k=k_default
        )
    if gallery is not None:
        namings = {}
        rows = naming_rows(data, vocabulary, encoder)
        raw = caption_vocabulary(data.texts(train), min_count=5, clean=False)
        raw_embeddings = embed_words(raw.words, encoder or data.encoder)
        for method in methods:
            cosine = name_directions(method.directions, mean, raw.words, raw_embeddings)
            if method.name == "cedar" and cedar is not None:
                axes = ConceptCoder(cedar).catalog[: 2 * cedar.dim]  # the words have their rows
                clean = [e.name if e.named else None for e in axes]
            else:
                found, _ = method_names(method, rows, data, mean, k_default)
                clean = [n.name if n.named else None for n in found]
            namings[method.name] = {"clean": clean, "cosine": [n.name for n in cosine]}
        readouts = None
        coder = ConceptCoder(cedar) if cedar is not None else None
        if coder is not None and coder.readout is not None:
            assert cedar is not None
            variants = readout_variants(
                cedar,
                coder.readout,
                data,
                lambda words: embed_words(words, encoder or data.encoder),
                progress,
            )
            readouts = (cedar, variants)
        report["filter_quality"] = gallery_quality(
            gallery, methods, namings, k_default, encoder or data.encoder, readouts
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown_report(report)
    if "filter_quality" in report:
        table += "\n" + filter_quality_markdown(report["filter_quality"])
    (out / "report.md").write_text(table)
    plot_fvu_curves(report, out / "fvu_k.png")
    written = ["report.json", "report.md", "fvu_k.png"]
    if cedar is not None:
        coder = ConceptCoder(cedar)
        concepts, activations = coder.encode(x[test])
        (out / "concepts.md").write_text(
            frequent_concepts_markdown(
                cedar.extra["catalog"], concepts, activations, data.texts(test)
            )
        )
        written.append("concepts.md")
    typer.echo(table + f"\nwrote {', '.join(f'{out}/{w}' for w in written)}")
