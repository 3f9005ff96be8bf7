"""The training side's command groups: `strata embed ...`, `strata train ...`, `strata eval ...`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from tqdm.contrib.logging import logging_redirect_tqdm

from training.core.cache import EmbeddingCache
from training.core.commands import LazyCommand, examples, lazy_group
from training.core.config import build_config
from training.core.errors import CacheError, InputError
from training.core.settings import load_settings
from training.corpora import CORPUS_KINDS, open_corpus

if TYPE_CHECKING:
    from training.embedding.job import EmbedSummary

# each command's module loads when the command runs (torch, POT, sklearn only then)
embed_app = typer.Typer(
    help="Embed a corpus into an embedding cache, import embeddings made elsewhere, inspect "
    "caches.",
    cls=lazy_group(
        LazyCommand(
            "import",
            "training.embedding.import_cli:import_command",
            "Check embeddings made elsewhere (.npy shards + metadata) and write them as a cache.",
            examples(
                "strata embed import runs/demo/cache-flickr8k-minilm --encoder minilm "
                "--out runs/imported",
                "strata embed import runs/demo/cache-flickr8k-minilm --encoder my-model "
                "--normalise --dtype float32 --out runs/imported-vectors",
            ),
        ),
        LazyCommand(
            "pairs",
            "training.cosae.cli:pairs_command",
            "Embed the same records with two encoders: a paired cache for CoSAE.",
            examples("strata embed pairs --out runs/cosae/pairs"),
        ),
    ),
    no_args_is_help=True,
)
train_app = typer.Typer(
    help="Learn transforms (GraSP-VL, CEDAR, CoSAE) from an embedding cache.",
    cls=lazy_group(
        LazyCommand(
            "grasp",
            "training.grasp.cli:train_command",
            "Train GraSP-VL: a rotation whose prefixes are the granularities.",
            examples(
                "strata train grasp --cache runs/demo/cache-flickr8k-minilm --validation-split dev "
                "--views runs/demo/views-flickr8k.npz --out runs/grasp",
            ),
        ),
        LazyCommand(
            "cedar",
            "training.cedar.cli:train_command",
            "Train CEDAR: named sparse concepts over an embedding cache.",
            examples(
                "strata train cedar --cache runs/demo/cache-flickr8k-minilm --epochs 10 "
                "--out runs/cedar",
                "strata train cedar --cache runs/demo/cache-flickr8k-minilm --sparsity 16 "
                "--epochs 10 --out runs/cedar16",
            ),
        ),
        LazyCommand(
            "floor",
            "training.cedar.floor_cli:floor_command",
            "Pick a CEDAR artifact's precision floor (which concepts are shown) on dev rows.",
            examples(
                "strata train floor --artifact runs/demo/cedar-flickr8k "
                "--cache runs/demo/cache-flickr8k-minilm",
            ),
        ),
        LazyCommand(
            "cosae",
            "training.cosae.cli:train_command",
            "Train CoSAE: a coupled sparse autoencoder over paired embeddings.",
            examples(
                "strata train cosae --pair synthetic --paired-fraction 0.01 --concepts 64 "
                "--sparsity 4 --steps 300 --out runs/cosae"
            ),
        ),
    ),
    no_args_is_help=True,
)
eval_app = typer.Typer(
    help="Score transforms and their baselines with the project's metrics.",
    cls=lazy_group(
        LazyCommand(
            "grasp",
            "training.grasp.cli:eval_command",
            "Score a GraSP-VL artifact and its baselines.",
            examples(
                "strata eval grasp --cache runs/demo/cache-flickr8k-minilm "
                "--artifact runs/demo/grasp-flickr8k "
                "--views runs/demo/views-flickr8k.npz --out runs/grasp-eval"
            ),
        ),
        LazyCommand(
            "cedar",
            "training.cedar.cli:eval_command",
            "Score a CEDAR artifact and its baselines (FVU, probes, naming).",
            examples(
                "strata eval cedar --cache runs/demo/cache-flickr8k-minilm "
                "--artifact runs/demo/cedar-flickr8k --sae-epochs 3 --out runs/cedar-eval"
            ),
        ),
        LazyCommand(
            "cosae",
            "training.cosae.cli:eval_command",
            "Score CoSAE against its baselines.",
            examples(
                "strata eval cosae --pair synthetic --methods cosae,procrustes "
                "--fractions 0.01,0.1 --concepts 64 --sparsity 4 --steps 300 --out runs/cosae-eval"
            ),
        ),
        LazyCommand(
            "upgrade",
            "training.cosae.upgrade_cli:eval_upgrade_command",
            "Score a query translator against re-embedding.",
            examples(
                "strata embed pairs --out runs/cosae/pairs",
                "strata eval upgrade --pair runs/cosae/pairs/layer.npz "
                "--methods procrustes,least-squares --out runs/upgrade-eval",
            ),
        ),
        LazyCommand(
            "cds",
            "training.cds.cli:eval_command",
            "Score concepts' scope (local or global) with CDS.",
            examples("strata eval cds --constructed --synthetic 16 --out runs/cds"),
        ),
    ),
    no_args_is_help=True,
)

CorpusKind = Annotated[
    str, typer.Option("--corpus", "-c", help=f"one of {', '.join(CORPUS_KINDS)}")
]
CorpusPath = Annotated[
    Path | None,
    typer.Option(
        "--path",
        "-p",
        help="dataset folder or file (not for compositional; flickr8k: the data folder's "
        "flickr8k/ by default, STRATA_DATA_DIR)",
    ),
]
Split = Annotated[
    str, typer.Option(help="flickr8k: train|dev|test|all; compositional: train|val|test|all")
]
Scenes = Annotated[int, typer.Option(help="compositional: number of scenes", min=1)]
Seed = Annotated[int, typer.Option(help="compositional: generator seed")]
Strict = Annotated[
    bool, typer.Option("--strict", help="fail on the first malformed entry instead of skipping it")
]


def corpus_location(kind: str, path: Path | None) -> Path | None:
    """Where a corpus is read from: `path` as given; for flickr8k without one, the data
    folder's flickr8k/ (docs/reference/settings.md#the-data-folder)."""
    if path is None and kind == "flickr8k":
        return load_settings().data_dir / "flickr8k"
    return path


@embed_app.command(
    "run",
    epilog=examples(
        "strata embed run --corpus flickr8k --out runs/flickr8k-minilm",
        "strata embed run --corpus compositional --scenes 200 --out runs/comp200 --shard-rows 100",
        "strata embed run --corpus coco --path data/coco-mini --encoder open_clip:ViT-B-32 "
        "--out runs/coco",
    ),
)
def run(
    out: Annotated[Path, typer.Option("--out", "-o", help="cache folder to create or resume")],
    corpus: CorpusKind = "flickr8k",
    path: CorpusPath = None,
    encoder: Annotated[
        str, typer.Option("--encoder", "-e", help="minilm | open_clip:<arch>[@weights]")
    ] = "minilm",
    split: Split = "all",
    images: Annotated[
        Path | None, typer.Option(help="coco: image folder (default: images/ beside the JSON)")
    ] = None,
    scenes: Scenes = 20_000,
    seed: Seed = 0,
    strict: Strict = False,
    dtype: Annotated[
        str | None, typer.Option(help="float16 | float32 (default from settings)")
    ] = None,
    shard_rows: Annotated[
        int | None, typer.Option(help="rows per shard (default from settings)", min=1)
    ] = None,
    batch_size: Annotated[int | None, typer.Option(help="encoder batch size", min=1)] = None,
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda[:n]")] = None,
    modalities: Annotated[
        str | None, typer.Option(help="text, image or text,image (default: what the records have)")
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="replace a cache made by a different job")
    ] = False,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Embed a corpus into the cache at OUT; a rerun resumes after the last whole shard."""
    from training.core.encoders import load_encoder
    from training.embedding.job import EmbedConfig, embed_corpus

    settings = load_settings()
    source = open_corpus(
        corpus,
        corpus_location(corpus, path),
        split=split,
        images=images,
        scenes=scenes,
        seed=seed,
        on_malformed="error" if strict else "skip",
    )
    flags = {
        "shard_rows": shard_rows or settings.shard_rows,
        "dtype": dtype or settings.cache_dtype,
        "modalities": tuple(m.strip() for m in modalities.split(",")) if modalities else None,
        "overwrite": overwrite,
        "progress": progress,
    }
    config = build_config(EmbedConfig, flags, "strata embed")
    model = load_encoder(
        encoder, device=device or settings.device, batch_size=batch_size or settings.batch_size
    )
    with logging_redirect_tqdm():
        summary = embed_corpus(source, model, out, config)
    typer.echo(format_summary(summary))


def format_summary(summary: EmbedSummary) -> str:
    if summary.already_complete:
        return f"{summary.out}: already complete ({summary.rows} rows); nothing to do"
    lines = [
        f"cache        {summary.out}",
        f"rows         {summary.rows} of {summary.records} records "
        f"({summary.rows_written} embedded now, "
        f"{summary.shards_resumed} shards resumed, {summary.shards_written} written)",
        f"skipped      {summary.corpus_skipped} malformed corpus entries, "
        f"{summary.records_unusable} records without a usable text or image",
        f"time         {summary.seconds:.1f} s, {summary.rows_per_second:.0f} rows/s",
        f"on disk      {summary.bytes_on_disk / 2**20:.1f} MiB",
    ]
    if summary.removed_partial_files:
        lines.append(f"cleaned      {len(summary.removed_partial_files)} files a killed run left")
    return "\n".join(lines)


@embed_app.command(
    "info",
    epilog=examples(
        "strata embed info runs/demo/cache-flickr8k-minilm",
        "strata embed info runs/demo/cache-flickr8k-minilm --json",
    ),
)
def info(
    cache: Annotated[Path, typer.Argument(help="cache folder")],
    as_json: Annotated[
        bool, typer.Option("--json", help="print the whole manifest as JSON")
    ] = False,
) -> None:
    """Describe a cache: encoder, dim, dtype, rows, shards, and what the corpus reader skipped."""
    opened = EmbeddingCache.open(cache, allow_incomplete=True)
    manifest = opened.manifest
    if as_json:
        typer.echo(manifest.to_json())
        return
    typer.echo(
        f"{cache}: {manifest.source} cache, {'complete' if manifest.complete else 'INCOMPLETE'}\n"
        f"encoder      {manifest.encoder or 'unknown (no manifest)'}\n"
        f"weights      {json.dumps(manifest.encoder_provenance or '-')}\n"
        f"dim / dtype  {manifest.dim} / {manifest.dtype}\n"
        f"modalities   {', '.join(manifest.modalities)}\n"
        f"rows         {manifest.rows} in {len(manifest.shards)} shards\n"
        f"skipped      {manifest.corpus_report.get('skipped', 0)} corpus entries"
    )


@embed_app.command(
    "verify",
    epilog=examples(
        "strata embed verify runs/demo/cache-flickr8k-minilm",
    ),
)
def verify(cache: Annotated[Path, typer.Argument(help="cache folder")]) -> None:
    """Check every listed file's checksum, row counts, shapes and unit norms; exit 1 on a fault."""
    faults = EmbeddingCache.open(cache).verify()
    for fault in faults:
        typer.echo(f"FAULT {fault}", err=True)
    if faults:
        raise CacheError(f"{cache}: {len(faults)} faults")
    typer.echo(f"{cache}: ok")


@embed_app.command(
    "peek",
    epilog=examples(
        "strata embed peek --corpus flickr8k --limit 3",
        "strata embed peek --corpus compositional --scenes 100",
    ),
)
def peek(
    corpus: CorpusKind = "flickr8k",
    path: CorpusPath = None,
    split: Split = "all",
    scenes: Scenes = 20_000,
    seed: Seed = 0,
    images: Annotated[Path | None, typer.Option(help="coco: the image folder")] = None,
    strict: Strict = False,
    limit: Annotated[int, typer.Option(help="records to print", min=0)] = 5,
) -> None:
    """Read a corpus without embedding it: a few records, the count, and what was skipped."""
    source = open_corpus(
        corpus,
        corpus_location(corpus, path),
        split=split,
        images=images,
        scenes=scenes,
        seed=seed,
        on_malformed="error" if strict else "skip",
    )
    count = 0
    for record in source:
        if count < limit:
            row = {"id": record.id, "text": record.text, "image_path": record.image_path}
            typer.echo(json.dumps({**row, "group": record.group, **record.fields}))
        count += 1
    typer.echo(f"{count} records, {source.report.skipped} skipped")
    for example in source.report.examples:
        typer.echo(f"  skipped {example}")
    if count == 0:
        raise InputError("the corpus yielded no records")
