"""`strata train floor`: pick the precision floor of a CEDAR artifact's shown concepts on a
cache's dev (val) rows (training/cedar/floor.py) and write it into the artifact, with each
concept's reference agreement on those rows (training/cedar/reference_agreement.py: what a
gallery's shift is read against, recorded at fit since it was kept); with
`--zero-shot-z`, record the readout's zero-shot cut in standard units too (what `strata train
cedar` records at fit: service/engine/open_vocabulary.py reads it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from training.cedar.concepts import REFERENCE
from training.cedar.data import SplitRows, load_split_rows
from training.cedar.floor import OTHER_CAPTIONS, SHOWN, dev_floor
from training.cedar.gallery_quality import embed_words
from training.cedar.readout.artifact import readout_of
from training.cedar.readout.vocabulary import (
    calibration_words,
    readout_input,
    text_directions,
    zero_shot_z,
)
from training.cedar.reference_agreement import reference_agreement
from training.core.artifacts import TransformArtifact
from training.core.errors import InputError


def learnt_zero_shot_z(artifact: TransformArtifact, data: SplitRows) -> float:
    """The readout's zero-shot cut τ in standard units on the cache's val rows, over its learnt
    words' text directions (training.cedar.readout.vocabulary.zero_shot_z, as `strata train cedar`
    records it)."""
    readout = readout_of(artifact.extra.get("readout"), artifact.tensors)
    if readout is None:
        raise InputError(f"{artifact} has no vocabulary readout: no zero-shot cut to record")
    _, cut = calibration_words(readout)
    recorded = artifact.extra["readout"].get("training", {}).get("zero_shot_cut")
    cut = float(recorded) if recorded is not None else cut
    learnt = [w for i, w in enumerate(readout.words) if not readout.is_zero_shot(i)]
    directions = text_directions(embed_words(learnt, data.encoder), artifact.mean)
    k = int(artifact.extra.get("k", 32))
    val_x = readout_input(
        data.embeddings[data.rows("val")], readout.source, artifact.rotation, artifact.mean, k
    )
    return zero_shot_z(val_x, directions, cut)


def floor_command(
    artifact: Annotated[Path, typer.Option("--artifact", help="the CEDAR artifact (rewritten)")],
    cache: Annotated[Path, typer.Option("--cache", help="captioned cache: its val rows judge")],
    others: Annotated[
        int, typer.Option(help="other captions of the image that must use a shown name", min=1)
    ] = OTHER_CAPTIONS,
    shown: Annotated[int, typer.Option(help="concepts a hit shows at most", min=1)] = SHOWN,
    zero_shot_z: Annotated[
        bool,
        typer.Option(
            "--zero-shot-z",
            help="also record the readout's zero_shot_z (the open vocabulary's cut), for an "
            "artifact trained before strata train cedar recorded it",
        ),
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print, write nothing")] = False,
) -> None:
    """Pick the floor on held-out precision a concept needs to be shown.

    The floor of greatest utility on the val rows (+1 per shown concept name the image's other
    captions use, −1 per one they do not), written into the artifact's `floor`, where the
    engine reads it.
    """
    loaded = TransformArtifact.load(artifact)
    data = load_split_rows(cache)
    record = dev_floor(loaded, data, str(cache), others, shown)
    typer.echo(f"floor {record['value']:.2f} (picked on {record['picked_on']})")
    typer.echo(json.dumps(record["at_floor"], indent=2))
    extra = {**loaded.extra, "floor": record}
    if zero_shot_z:
        z = learnt_zero_shot_z(loaded, data)
        readout = dict(extra["readout"])
        readout["training"] = {**readout.get("training", {}), "zero_shot_z": round(z, 6)}
        extra["readout"] = readout
        typer.echo(f"zero_shot_z {z:.3f} (the val rows, over the learnt words' text directions)")
    reference = reference_agreement(loaded, data)
    if reference is not None:
        typer.echo(f"reference agreement of {int((reference[:, 1] > 0).sum())} concepts")
    if dry_run:
        return
    loaded.extra = extra
    if reference is not None:
        loaded.tensors = {**loaded.tensors, REFERENCE: reference}
    loaded.save(artifact, overwrite=True)
    typer.echo(f"written into {artifact}")
