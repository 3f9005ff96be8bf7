"""`strata upgrade`: write a query translator for a bundle, so that it answers model B's queries.

It reads the bundle built with model A (CURRENT), the cache A it was built from (`--cache-a`,
default the cache its manifest records) and a cache embedded by model B whose rows share ids
with A's (the paired sample; its other rows count as unpaired B data), fits the translator
B → A (training/cosae/upgrade.py: the pairs and held-out rows, the fit and its scores) and
writes it; `strata serve --translator` loads it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from tqdm.contrib.logging import logging_redirect_tqdm

from indexer.format.bundle import Bundle
from training.core.cache import EmbeddingCache
from training.core.commands import SeedOption
from training.core.encoders import resolve_device
from training.core.errors import InputError
from training.core.settings import load_settings
from training.cosae.cli import (
    ConfigOption,
    DeviceOption,
    ProgressOption,
    StepsOption,
    cosae_config,
    parse_methods,
)
from training.cosae.pairs import checked_fraction
from training.cosae.upgrade import (
    TRANSLATOR_METHODS,
    fit_translator,
    held_out_scores,
    shared_rows,
)

log = logging.getLogger(__name__)


def open_caches(
    bundle: Bundle, cache_a: Path | None, cache_b: Path
) -> tuple[EmbeddingCache, EmbeddingCache]:
    """(A's cache, B's cache), refused unless A's is the bundle's encoder and dimension, B's is
    another encoder, and B's has the bundle's modality."""
    manifest = bundle.manifest
    source_cache = manifest.source.get("cache")
    if cache_a is None and not source_cache:
        raise InputError(f"bundle {bundle.path} records no source cache; pass --cache-a")
    old = EmbeddingCache.open(cache_a or Path(source_cache))
    new = EmbeddingCache.open(cache_b)
    if old.manifest.encoder != manifest.encoder or old.dim != manifest.dim:
        raise InputError(
            f"cache {old.root} holds {old.manifest.encoder} ({old.dim}-d) but the bundle was "
            f"built with {manifest.encoder} ({manifest.dim}-d)"
        )
    if new.manifest.encoder == manifest.encoder:
        raise InputError(f"cache {new.root} is embedded by model A ({manifest.encoder}) too")
    modality = manifest.modality
    if modality not in new.modalities:
        raise InputError(f"cache {new.root} has no {modality} embeddings (the bundle's modality)")
    return old, new


def upgrade_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="translator folder to write")],
    bundles: Annotated[
        Path, typer.Option("--bundles", help="bundle directory built with model A (CURRENT)")
    ],
    cache_b: Annotated[
        Path, typer.Option("--cache-b", help="embedding cache of model B; ids shared with A's")
    ],
    cache_a: Annotated[
        Path | None, typer.Option("--cache-a", help="A's cache (default: the bundle's source)")
    ] = None,
    paired_fraction: Annotated[
        float, typer.Option(help="pairs used, as a share of A's rows (capped by shared ids)")
    ] = 0.01,
    method: Annotated[
        str,
        typer.Option(
            help=f"{' | '.join(TRANSLATOR_METHODS)} (procrustes: the best of them in `strata "
            "eval upgrade` on Flickr8k at every paired fraction)"
        ),
    ] = "procrustes",
    config: ConfigOption = None,
    steps: StepsOption = None,
    device: DeviceOption = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing translator")] = False,
    progress: ProgressOption = True,
    seed: SeedOption = None,
) -> None:
    """Fit a query translator B → A so a bundle built with A answers queries embedded by B."""
    parse_methods(method, TRANSLATOR_METHODS)
    fraction = checked_fraction(paired_fraction)
    run_config = cosae_config(config, steps=steps, seed=seed)
    if out.exists() and not overwrite:
        raise InputError(f"{out} exists; pass --overwrite to replace it")
    bundle = Bundle.open(bundles)
    manifest = bundle.manifest
    if not manifest.encoder:
        raise InputError(f"bundle {bundle.path} records no encoder (model A)")
    old, new = open_caches(bundle, cache_a, cache_b)
    modality = manifest.modality
    ids_a = np.asarray(old.metadata().column("id").to_pylist(), dtype=object)
    ids_b = np.asarray(new.metadata().column("id").to_pylist(), dtype=object)
    split = shared_rows(ids_a, ids_b, fraction, run_config.seed)
    if split is None:
        raise InputError(f"caches {old.root} and {new.root} share no item ids: nothing is paired")
    paired, held = len(split.pair_a), len(split.held_a)
    x_a, x_b = old.embeddings(modality), new.embeddings(modality)
    target, source = split.paired_first(x_a, x_b)
    log.info("fitting %s: %d pairs, %d rows of A, %d rows of B", method, paired, len(x_a), len(x_b))
    device = resolve_device(device or load_settings().device)
    with logging_redirect_tqdm():
        translator = fit_translator(
            source,
            target,
            paired,
            method,
            new.manifest.encoder,
            manifest.encoder,
            run_config,
            out.with_name(out.name + ".work"),
            device,
            progress,
        )
    scores = (
        held_out_scores(translator, x_b[split.held_b], x_a[split.held_a]) if held >= 2 else None
    )
    translator.info = {
        "bundle": {"path": str(bundle.path.resolve()), "version": manifest.version},
        "caches": {"a": str(old.root.resolve()), "b": str(new.root.resolve())},
        "modality": modality,
        "paired": {
            "fraction": fraction,
            "pairs": paired,
            "shared_ids": split.shared,
            "rows_a": len(x_a),
            "rows_b": len(x_b),
        },
        "held_out": scores,
        "config": run_config.model_dump() if method == "cosae" else None,
    }
    translator.save(out, overwrite=overwrite)
    score_text = "held out     too few shared ids to score"
    if scores:
        score_text = (
            f"held out     {scores['pairs']} pairs: cosine {scores['cosine']:.3f}, "
            f"R@1 {scores['r1']:.3f}"
        )
    typer.echo(
        f"translator   {out} ({method})\n"
        f"queries by   {new.manifest.encoder} ({new.dim}-d) → {manifest.encoder} "
        f"({manifest.dim}-d), bundle {bundle.path}\n"
        f"pairs        {paired} of {len(x_a)} rows of A ({split.shared} shared ids)\n"
        f"{score_text}\n"
        f"serve with   strata serve --bundles {bundles} --translator {out}"
    )
