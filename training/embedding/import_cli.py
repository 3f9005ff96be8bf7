"""`strata embed import`: embeddings made elsewhere into a cache (embedding/importing.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from training.core.settings import load_settings
from training.embedding.importing import ImportConfig, ImportSummary, import_embeddings


def import_command(
    source: Annotated[
        Path, typer.Argument(help="folder of img_emb/img_emb_N.npy (and/or text_emb/) shards")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="cache folder to create")],
    encoder: Annotated[
        str,
        typer.Option(
            "--encoder",
            "-e",
            help="the model that made the embeddings, recorded in the cache: a spec this "
            "machine can load (open_clip:ViT-B-32@laion2b_s34b_b79k) serves text and image "
            "queries; any other name, vector queries only",
        ),
    ],
    metadata: Annotated[
        Path | None,
        typer.Option(
            help="ids and metadata of all rows in order, one file (.jsonl: a JSON object a "
            "row, or .parquet); default: SOURCE/metadata/metadata_N.parquet beside each shard"
        ),
    ] = None,
    normalise: Annotated[
        bool,
        typer.Option(
            "--normalise", help="scale rows to unit norm (default: refuse rows that are not)"
        ),
    ] = False,
    image_root: Annotated[
        Path | None,
        typer.Option(help="the folder relative `image_path` values are under (thumbnails)"),
    ] = None,
    dtype: Annotated[
        str | None, typer.Option(help="float16 | float32 (default from settings)")
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="replace what OUT holds")] = False,
) -> None:
    """Check embeddings made elsewhere (clip-retrieval's layout) and write them as a cache.

    Every shard is checked (2-d, one dimension, finite rows, unit norm, its metadata's rows,
    unique ids); the first fault is one line naming the file and the row. The cache feeds
    `strata train` and `strata index build` as an embedded one does."""
    config = ImportConfig(
        encoder=encoder,
        metadata=metadata,
        normalise=normalise,
        dtype=dtype or load_settings().cache_dtype,
        image_root=image_root,
        overwrite=overwrite,
    )
    typer.echo(format_import(import_embeddings(source.expanduser(), out, config)))


def format_import(summary: ImportSummary) -> str:
    scaled = f", {summary.normalised_rows} scaled to unit norm" if summary.normalised_rows else ""
    return "\n".join(
        [
            f"cache        {summary.out}",
            f"rows         {summary.rows} in {summary.shards} shards "
            f"({', '.join(summary.modalities)}, {summary.dim}-d{scaled})",
            f"time         {summary.seconds:.1f} s",
        ]
    )
