"""`strata eval upgrade`: the table of query translators (`strata upgrade`, which writes one for
a bundle, is indexer/cli/upgrade.py).

`strata eval upgrade` measures translators on a Flickr8k caption pair (`--pair layer`: B =
MiniLM, A = MiniLM cut after layer 3; `--pair tfidf`: A = TF-IDF + SVD), training on the
official train images and scoring on the official test images.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from tqdm.contrib.logging import logging_redirect_tqdm

from training.core.commands import SeedOption
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
from training.cosae.pairs import EmbeddingPair
from training.cosae.upgrade import (
    TRANSLATOR_METHODS,
    upgrade_markdown,
    upgrade_table,
)


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
    seed: SeedOption = None,
) -> None:
    """A/A, B/B and translated-B/A R@1 and mAP on Flickr8k test captions: upgrade.md/.json.

    B is domain i of the pair (MiniLM), A domain j (the old model). Query = one test caption,
    relevant = the other captions of its image; translators see the train captions only.
    """
    if pair == "synthetic":
        raise InputError("eval upgrade needs a Flickr8k caption pair: layer, tfidf or its .npz")
    fraction_list = parse_fractions(fractions)
    method_list = parse_methods(methods, TRANSLATOR_METHODS)
    run_config = cosae_config(config, steps=steps, seed=seed)
    device = resolve_device(device or load_settings().device)
    root = flickr8k or load_settings().data_dir / "flickr8k"
    data = open_pair(
        pair, root, None, 0, layer, tfidf_dim, device, run_config.seed, store=out / "pair.npz"
    )
    train, test = official_split_rows(data, root, run_config.seed)
    with logging_redirect_tqdm():
        table = upgrade_table(
            data.x_i,
            data.x_j,
            np.asarray(data.groups),
            train,
            test,
            fraction_list,
            method_list,
            (data.name_i, data.name_j),
            run_config,
            out / "work",
            device,
            progress,
        )
    table["config"] = run_config.model_dump()
    text = upgrade_markdown(table)
    atomic_write_bytes(out / "upgrade.json", (json.dumps(table, indent=2) + "\n").encode())
    atomic_write_bytes(out / "upgrade.md", text.encode())
    typer.echo(text + f"\nwrote {out}/upgrade.md, {out}/upgrade.json")
