"""`strata train cosae` and `strata eval cosae` (registered by `training.cli`).

A pair is named by `--pair`: `synthetic` (known shared factors), `tfidf` (MiniLM vs TF-IDF +
SVD of Flickr8k captions), `layer` (MiniLM vs one of its intermediate layers), or the path of a
pair file written earlier (`pair.npz`). Bad input is an `InputError`: one line, exit 2.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from tqdm.contrib.logging import logging_redirect_tqdm

from training.core.artifacts import data_fingerprint
from training.core.commands import SeedOption
from training.core.config import load_config
from training.core.encoders import load_encoder, resolve_device
from training.core.errors import InputError
from training.core.files import atomic_write_bytes
from training.core.settings import load_settings
from training.cosae.config import CosaeConfig
from training.cosae.evaluate import DEFAULT_FRACTIONS, METHODS, SplitData, evaluate_pair
from training.cosae.methods import coupled_sae_method, score_method
from training.cosae.model import save_cosae
from training.cosae.pairs import (
    PAIR_KINDS,
    EmbeddingPair,
    checked_fraction,
    flickr8k_captions,
    layer_pair,
    load_pair,
    save_pair,
    split_pair,
    synthetic_pair,
    tfidf_pair,
    tfidf_svd_embeddings,
)
from training.cosae.report import markdown_report, plot_against_fraction
from training.cosae.train import train_coupled
from training.loop import work_folder

log = logging.getLogger(__name__)

PairOption = Annotated[
    str, typer.Option("--pair", help=f"{' | '.join(PAIR_KINDS)} | a pair file (.npz)")
]
Flickr8kOption = Annotated[
    Path | None,
    typer.Option("--flickr8k", help="Flickr8k folder for tfidf/layer (default: DATA_DIR/flickr8k)"),
]
CaptionsOption = Annotated[
    int | None, typer.Option(help="tfidf/layer: use the first N captions only")
]
RowsOption = Annotated[int, typer.Option(help="synthetic: number of items")]
LayerOption = Annotated[int, typer.Option(help="layer: MiniLM hidden state (0..6) for domain j")]
TfidfDimOption = Annotated[int, typer.Option(help="tfidf: SVD dimension of domain j")]
ConfigOption = Annotated[Path | None, typer.Option(help="CosaeConfig as JSON")]
StepsOption = Annotated[int | None, typer.Option(help="override the config's steps")]
ConceptsOption = Annotated[int | None, typer.Option(help="override the shared dictionary size")]
KOption = Annotated[
    int | None, typer.Option("--sparsity", help="override k of both domains", min=1)
]
DistributionOption = Annotated[
    str | None, typer.Option(help="override the distribution term: energy | sorted | sliced")
]
DeviceOption = Annotated[str | None, typer.Option(help="auto | cpu | cuda")]
ProgressOption = Annotated[bool, typer.Option(help="show progress bars")]


def cosae_config(path: Path | None, **overrides: Any) -> CosaeConfig:
    """The config from a JSON file (or defaults) with the given overrides (`k` sets both
    domains' k); InputError naming the file and the field if bad."""
    if overrides.get("paired_fraction") is not None:
        checked_fraction(overrides["paired_fraction"])
    if overrides.get("k") is not None:
        overrides["k_i"] = overrides["k_j"] = overrides["k"]
    overrides.pop("k", None)
    return load_config(CosaeConfig, path, **overrides)


def parse_fractions(text: str) -> list[float]:
    """'0.001,0.01' → [0.001, 0.01]; every fraction in (0, 1], else InputError."""
    try:
        fractions = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--fractions must be a comma list of numbers, got {text!r}") from None
    if not fractions:
        raise InputError("--fractions is empty")
    return [checked_fraction(f) for f in fractions]


def parse_methods(text: str, choices: Sequence[str] = METHODS) -> list[str]:
    """'cosae, procrustes' → ['cosae', 'procrustes']; InputError naming any not in `choices`."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in choices]
    if unknown or not names:
        raise InputError(
            f"unknown method(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(choices)}"
        )
    return names


def open_pair(
    spec: str,
    flickr8k: Path | None,
    captions: int | None,
    rows: int,
    layer: int,
    tfidf_dim: int,
    device: str,
    seed: int,
    store: Path | None = None,
) -> EmbeddingPair:
    """The pair `spec` names, built (and kept at `store`) or read from a pair file.

    A pair built earlier with the same spec and options is read back from `store` rather than
    embedded again.
    """
    if spec not in PAIR_KINDS:
        path = Path(spec)
        if path.suffix != ".npz" and not path.exists():
            raise InputError(f"unknown pair {spec!r}; expected {', '.join(PAIR_KINDS)} or a .npz")
        return load_pair(path)
    recipe = (
        {"pair": spec, "rows": rows, "seed": seed}
        if spec == "synthetic"
        else {
            "pair": spec,
            "flickr8k": str(flickr8k),
            "captions": captions,
            "layer": layer if spec == "layer" else None,
            "tfidf_dim": tfidf_dim if spec == "tfidf" else None,
        }
    )
    recipe_path = store.with_suffix(".json") if store else None
    built = store and store.is_file() and recipe_path and recipe_path.is_file()
    if built and json.loads(recipe_path.read_text()) == recipe:
        log.info("reusing the pair built earlier at %s", store)
        return load_pair(store)
    pair = build_pair(spec, flickr8k, captions, rows, layer, tfidf_dim, device, seed)
    if store and recipe_path:
        save_pair(store, pair)
        atomic_write_bytes(recipe_path, (json.dumps(recipe) + "\n").encode())
    return pair


def build_pair(
    spec: str,
    flickr8k: Path | None,
    captions: int | None,
    rows: int,
    layer: int,
    tfidf_dim: int,
    device: str,
    seed: int,
) -> EmbeddingPair:
    if spec == "synthetic":
        if rows < 20:
            raise InputError(f"--rows must be at least 20 for a synthetic pair, got {rows}")
        return synthetic_pair(rows=rows, seed=seed)
    if captions is not None and captions < 20:
        raise InputError(f"--captions must be at least 20, got {captions}")
    root = flickr8k or load_settings().data_dir / "flickr8k"
    texts, images = flickr8k_captions(root, limit=captions)
    log.info("embedding %d captions for the %s pair", len(texts), spec)
    encoder = load_encoder("minilm", device=device)
    if spec == "tfidf":
        return tfidf_pair(texts, encoder, dim=tfidf_dim, groups=images)
    return layer_pair(texts, encoder.model, layer=layer, groups=images)


def train_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="artifact folder to write")],
    pair: PairOption = "synthetic",
    paired_fraction: Annotated[
        float, typer.Option(help="share of the training rows whose pair is known, in (0, 1]")
    ] = 0.01,
    flickr8k: Flickr8kOption = None,
    captions: CaptionsOption = None,
    rows: RowsOption = 4000,
    layer: LayerOption = 3,
    tfidf_dim: TfidfDimOption = 256,
    config: ConfigOption = None,
    steps: StepsOption = None,
    concepts: ConceptsOption = None,
    k: KOption = None,
    distribution: DistributionOption = None,
    seed: SeedOption = None,
    work: Annotated[Path | None, typer.Option(help="checkpoint folder (default: OUT.work)")] = None,
    device: DeviceOption = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing artifact")] = False,
    progress: ProgressOption = True,
) -> None:
    """Train CoSAE on a pair with a share of its pairs known; score it; write the artifact."""
    run_config = cosae_config(
        config,
        paired_fraction=paired_fraction,
        steps=steps,
        n_concepts=concepts,
        k=k,
        distribution=distribution,
        seed=seed,
    )
    if out.exists() and not overwrite:
        raise InputError(f"{out} exists; pass --overwrite to replace it")
    device = resolve_device(device or load_settings().device)
    work = work_folder(out, work)
    data = open_pair(
        pair,
        flickr8k,
        captions,
        rows,
        layer,
        tfidf_dim,
        device,
        run_config.seed,
        store=work / "pair.npz",
    )
    split = split_pair(data, seed=run_config.seed)
    rows_of = SplitData.of(data, split)
    pairs = rows_of.pairs(run_config.paired_fraction)
    with logging_redirect_tqdm():
        result = train_coupled(
            rows_of.train_i,
            rows_of.train_j,
            pairs,
            run_config,
            val=(rows_of.val_i, rows_of.val_j),
            work_dir=work,
            device=device,
            progress=progress,
        )
    model = result.model.cpu()
    metrics = score_method(
        coupled_sae_method("cosae", model, result.seconds),
        rows_of.test_i,
        rows_of.test_j,
        rows_of.test_factors,
    )
    save_cosae(
        out,
        model,
        {
            "pair": data.describe(),
            "paired": {"fraction": run_config.paired_fraction, "pairs": len(pairs)},
            "split": {"train": len(split.train), "val": len(split.val), "test": len(split.test)},
            "config": run_config.model_dump(),
            "data_fingerprint": data_fingerprint(rows_of.train_i, rows_of.train_j),
            "metrics": {"test": metrics, "steps_run": result.steps_run, "history": result.history},
        },
    )
    typer.echo(
        f"artifact     {out}\n"
        f"pair         {data.name}: {data.name_i} ({data.x_i.shape[1]}-d) vs "
        f"{data.name_j} ({data.x_j.shape[1]}-d)\n"
        f"pairs known  {len(pairs)} of {len(split.train)} training rows\n"
        f"test         FVU i {metrics['fvu_i']:.4f}, j {metrics['fvu_j']:.4f}; "
        f"translation FVU i→j {metrics['translation_fvu_ij']:.4f}, R@1 {metrics['r1_ij']:.4f}; "
        f"active-set F1 {metrics['f1']:.4f}\n"
        f"time         {result.seconds:.1f} s"
    )


def eval_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="report folder")],
    pair: PairOption = "synthetic",
    fractions: Annotated[
        str, typer.Option(help="comma list of paired fractions in (0, 1]")
    ] = ",".join(f"{f:g}" for f in DEFAULT_FRACTIONS),
    methods: Annotated[str, typer.Option(help=f"comma list of {', '.join(METHODS)}")] = ",".join(
        METHODS
    ),
    flickr8k: Flickr8kOption = None,
    captions: CaptionsOption = None,
    rows: RowsOption = 4000,
    layer: LayerOption = 3,
    tfidf_dim: TfidfDimOption = 256,
    config: ConfigOption = None,
    steps: StepsOption = None,
    concepts: ConceptsOption = None,
    k: KOption = None,
    distribution: DistributionOption = None,
    seed: SeedOption = None,
    device: DeviceOption = None,
    progress: ProgressOption = True,
) -> None:
    """CoSAE and every baseline at each paired fraction: report.md, report.json, metrics.png.

    Rerunning with the same options reuses the pair and every finished result under OUT.
    """
    fraction_list = parse_fractions(fractions)
    method_list = parse_methods(methods)
    run_config = cosae_config(
        config, steps=steps, n_concepts=concepts, k=k, distribution=distribution, seed=seed
    )
    device = resolve_device(device or load_settings().device)
    data = open_pair(
        pair,
        flickr8k,
        captions,
        rows,
        layer,
        tfidf_dim,
        device,
        run_config.seed,
        store=out / "pair.npz",
    )
    with logging_redirect_tqdm():
        report = evaluate_pair(
            data,
            fraction_list,
            run_config,
            method_list,
            work_dir=out / "work",
            device=device,
            progress=progress,
        )
    table = markdown_report(report)
    atomic_write_bytes(out / "report.json", (json.dumps(report, indent=2) + "\n").encode())
    atomic_write_bytes(out / "report.md", table.encode())
    plot_against_fraction(report, out / "metrics.png")
    typer.echo(table + f"\nwrote {out}/report.md, {out}/report.json, {out}/metrics.png")


def pairs_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="folder for layer.npz and tfidf.npz")],
    flickr8k: Flickr8kOption = None,
    captions: CaptionsOption = None,
    layer: LayerOption = 3,
    tfidf_dim: TfidfDimOption = 256,
    device: DeviceOption = None,
) -> None:
    """Both Flickr8k caption pairs from one MiniLM pass: OUT/layer.npz and OUT/tfidf.npz.

    The layer pair (MiniLM vs its layer LAYER) is built as `--pair layer` builds it and kept
    with its recipe, so a rerun reuses it; the tfidf pair takes the same MiniLM rows as its
    domain i. Give the files to `strata eval cosae --pair` and `strata eval upgrade --pair`.
    """
    device = resolve_device(device or load_settings().device)
    layered = open_pair(
        "layer", flickr8k, captions, 0, layer, tfidf_dim, device, 0, store=out / "layer.npz"
    )
    root = flickr8k or load_settings().data_dir / "flickr8k"
    texts, _ = flickr8k_captions(root, limit=captions)
    if len(texts) != len(layered.x_i):
        raise InputError(f"{out / 'layer.npz'} holds {len(layered.x_i)} rows, not {len(texts)}")
    tfidf = EmbeddingPair(
        name="minilm-vs-tfidf",
        x_i=layered.x_i,
        x_j=tfidf_svd_embeddings(texts, tfidf_dim),
        name_i=layered.name_i,
        name_j=f"tfidf-svd{tfidf_dim}",
        groups=layered.groups,
    )
    save_pair(out / "tfidf.npz", tfidf)
    typer.echo(
        f"wrote {out / 'layer.npz'} ({layered.name}) and {out / 'tfidf.npz'} ({tfidf.name}): "
        f"{len(texts)} captions"
    )
