"""`strata train floor`: pick the precision floor of a CEDAR artifact's shown concepts on a
cache's dev (val) rows (training/cedar/floor.py) and write it into the artifact."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from training.cedar.data import load_split_rows
from training.cedar.floor import OTHER_CAPTIONS, SHOWN, dev_floor
from training.core.artifacts import TransformArtifact


def floor_command(
    artifact: Annotated[Path, typer.Option("--artifact", help="the CEDAR artifact (rewritten)")],
    cache: Annotated[Path, typer.Option("--cache", help="captioned cache: its val rows judge")],
    others: Annotated[
        int, typer.Option(help="other captions of the image that must use a shown name", min=1)
    ] = OTHER_CAPTIONS,
    shown: Annotated[int, typer.Option(help="concepts a hit shows at most", min=1)] = SHOWN,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print, write nothing")] = False,
) -> None:
    """Pick the floor on held-out precision a concept needs to be shown.

    The floor of greatest utility on the val rows (+1 per shown concept name the image's other
    captions use, −1 per one they do not), written into the artifact's `floor`, where the
    engine reads it.
    """
    loaded = TransformArtifact.load(artifact)
    record = dev_floor(loaded, load_split_rows(cache), str(cache), others, shown)
    typer.echo(f"floor {record['value']:.2f} (picked on {record['picked_on']})")
    typer.echo(json.dumps(record["at_floor"], indent=2))
    if dry_run:
        return
    loaded.extra = {**loaded.extra, "floor": record}
    loaded.save(artifact, overwrite=True)
    typer.echo(f"written into {artifact}")
