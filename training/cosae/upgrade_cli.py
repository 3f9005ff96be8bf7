"""`strata upgrade` (write a query translator for a bundle) and `strata eval upgrade` (its table).

`strata upgrade` reads the bundle built with model A, the cache A it was built from and a cache
embedded by model B whose rows share ids with A's (the paired sample; its other rows count as
unpaired B data), fits the translator B → A and writes it; `strata serve --translator` loads it.

`strata eval upgrade` measures translators on a Flickr8k caption pair (`--pair layer`: B =
MiniLM, A = MiniLM cut after layer 3; `--pair tfidf`: A = TF-IDF + SVD), training on the
official train images and scoring on the official test images.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from tqdm.contrib.logging import logging_redirect_tqdm

from training.core.cache import EmbeddingCache
from training.core.encoders import resolve_device
from training.core.errors import InputError
from training.core.files import atomic_write_bytes
from training.core.settings import load_settings
from training.cosae.cli import (
    ConfigOption,
    DeviceOption,
    Flickr8kOption,
    LayerOption,
    PairOption,
    ProgressOption,
    StepsOption,
    TfidfDimOption,
    cosae_config,
    open_pair,
    parse_fractions,
    parse_methods,
)
from training.cosae.pairs import EmbeddingPair, checked_fraction
from training.cosae.upgrade import (
    TRANSLATOR_METHODS,
    fit_translator,
    held_out_scores,
    upgrade_markdown,
    upgrade_table,
)

log = logging.getLogger(__name__)

HELD_OUT = 1000  # shared ids kept out of the pairs to score the translator on


def official_split_rows(
    pair: EmbeddingPair, flickr8k: Path, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train rows in a seeded order, test rows) by the Flickr8k split of each row's image."""
    from training.corpora.flickr8k import Flickr8kCorpus

    if pair.groups is None:
        raise InputError(f"pair {pair.name} has no image groups; use a Flickr8k caption pair")
    image_split = Flickr8kCorpus(flickr8k).image_split
    splits = np.array([image_split.get(str(group), "") for group in pair.groups])
    train, test = np.flatnonzero(splits == "train"), np.flatnonzero(splits == "test")
    if len(train) < 2 or len(test) < 2:
        raise InputError(
            f"pair {pair.name}: {len(train)} train and {len(test)} test rows by the Flickr8k "
            f"splits of {flickr8k}; is it a pair of those captions?"
        )
    return np.random.default_rng(seed).permutation(train), test


def eval_upgrade_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="report folder")],
    pair: PairOption = "layer",
    fractions: Annotated[
        str, typer.Option(help="comma list of paired fractions of the training captions")
    ] = "0.001,0.01,0.1,1",
    methods: Annotated[
        str, typer.Option(help=f"comma list of {', '.join(TRANSLATOR_METHODS)}")
    ] = ",".join(TRANSLATOR_METHODS),
    flickr8k: Flickr8kOption = None,
    layer: LayerOption = 3,
    tfidf_dim: TfidfDimOption = 256,
    config: ConfigOption = None,
    steps: StepsOption = None,
    device: DeviceOption = None,
    progress: ProgressOption = True,
) -> None:
    """A/A, B/B and translated-B/A R@1 and mAP on Flickr8k test captions: upgrade.md/.json.

    B is domain i of the pair (MiniLM), A domain j (the old model). Query = one test caption,
    relevant = the other captions of its image; translators see the train captions only.
    """
    if pair == "synthetic":
        raise InputError("eval upgrade needs a Flickr8k caption pair: layer, tfidf or its .npz")
    fraction_list = parse_fractions(fractions)
    method_list = parse_methods(methods, TRANSLATOR_METHODS)
    run_config = cosae_config(config, steps=steps)
    device = resolve_device(device or load_settings().device)
    root = flickr8k or load_settings().data_dir / "flickr8k"
    data = open_pair(
        pair, root, None, 0, layer, tfidf_dim, device, run_config.seed, store=out / "pair.npz"
    )
    train, test = official_split_rows(data, root, run_config.seed)
    with logging_redirect_tqdm():
        table = upgrade_table(
            data.x_i, data.x_j, np.asarray(data.groups), train, test, fraction_list,
            method_list, (data.name_i, data.name_j), run_config, out / "work", device, progress,
        )  # fmt: skip
    table["config"] = run_config.model_dump()
    text = upgrade_markdown(table)
    atomic_write_bytes(out / "upgrade.json", (json.dumps(table, indent=2) + "\n").encode())
    atomic_write_bytes(out / "upgrade.md", text.encode())
    typer.echo(text + f"\nwrote {out}/upgrade.md, {out}/upgrade.json")


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
) -> None:
    """Fit a query translator B → A so a bundle built with A answers queries embedded by B."""
    from indexer.bundle import Bundle

    parse_methods(method, TRANSLATOR_METHODS)
    fraction = checked_fraction(paired_fraction)
    run_config = cosae_config(config, steps=steps)
    if out.exists() and not overwrite:
        raise InputError(f"{out} exists; pass --overwrite to replace it")
    bundle = Bundle.open(bundles)
    manifest = bundle.manifest
    if not manifest.encoder:
        raise InputError(f"bundle {bundle.path} records no encoder (model A)")
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
    ids_a = np.asarray(old.metadata().column("id").to_pylist(), dtype=object)
    ids_b = np.asarray(new.metadata().column("id").to_pylist(), dtype=object)
    _, rows_a, rows_b = np.intersect1d(
        ids_a.astype(str), ids_b.astype(str), assume_unique=True, return_indices=True
    )
    if not len(rows_a):
        raise InputError(f"caches {old.root} and {new.root} share no item ids: nothing is paired")
    order = np.random.default_rng(run_config.seed).permutation(len(rows_a))
    wanted = max(1, int(np.ceil(fraction * len(ids_a) - 1e-9)))
    held = min(HELD_OUT, len(rows_a) // 5)  # scored, never paired
    paired = min(wanted, len(rows_a) - held)
    pair_a, pair_b = rows_a[order[:paired]], rows_b[order[:paired]]
    held_a, held_b = rows_a[order[len(order) - held :]], rows_b[order[len(order) - held :]]
    x_a, x_b = old.embeddings(modality), new.embeddings(modality)
    target = np.concatenate([x_a[pair_a], np.delete(x_a, pair_a, axis=0)])
    source = np.concatenate([x_b[pair_b], np.delete(x_b, pair_b, axis=0)])
    log.info("fitting %s: %d pairs, %d rows of A, %d rows of B", method, paired, len(x_a), len(x_b))
    device = resolve_device(device or load_settings().device)
    with logging_redirect_tqdm():
        translator = fit_translator(
            source, target, paired, method, new.manifest.encoder, manifest.encoder, run_config,
            out.with_name(out.name + ".work"), device, progress,
        )  # fmt: skip
    scores = held_out_scores(translator, x_b[held_b], x_a[held_a]) if held >= 2 else None
    translator.info = {
        "bundle": {"path": str(bundle.path.resolve()), "version": manifest.version},
        "caches": {"a": str(old.root.resolve()), "b": str(new.root.resolve())},
        "modality": modality,
        "paired": {"fraction": fraction, "pairs": paired, "shared_ids": len(rows_a),
                   "rows_a": len(x_a), "rows_b": len(x_b)},
        "held_out": scores,
        "config": run_config.model_dump() if method == "cosae" else None,
    }  # fmt: skip
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
        f"pairs        {paired} of {len(x_a)} rows of A ({len(rows_a)} shared ids)\n"
        f"{score_text}\n"
        f"serve with   strata serve --bundles {bundles} --translator {out}"
    )
