"""Which reading of a word a readout serves: the logistic readout alone, the discriminant
direction of the rows whose own caption uses the word alone, or the two added in standard
units (the default; training/cedar/readout/discriminant.py), each at every covariance
shrinkage λ of `--shrinkage`.

The logistic readout is trained once, as `strata train cedar` trains it; each arm is then cut
per word with the same rule (training.cedar.readout.cuts.calibrate, on the train and val rows)
and scored with the same metric code:

1. **Dev splits**, where the choice was made: the `--cache` corpus's val rows, cut on one half
   (by image) with the train rows and scored on the other, both ways (macro F1 over the words
   with `min_calibration` relevant rows in the scored half: readout_cuts.dev_comparison); and
   the `--other` corpus's val rows, cut on the training corpus alone (cross-corpus, no gallery
   labels): macro precision / recall / F1 over the words `strata eval cedar --gallery` judges
   there and the readout learnt.
2. **Test rows**, reported, not chosen on: the same on both corpora's test rows, beside the
   keyword on the row's own caption.

    python -m benchmarks.training.readout_readings --cache runs/demo/cache-flickr8k-minilm \
        --cedar runs/demo/cedar-flickr8k --other runs/comp20k-minilm \
        --shrinkage 0.001 0.003 0.01 0.03
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from benchmarks.training.readout_capacity import artifact_rows, train
from benchmarks.training.readout_cuts import dev_comparison, macro
from training.cedar.data import groups_of, load_split_rows
from training.cedar.gallery_quality import judged_words
from training.cedar.readout.cuts import calibrate
from training.cedar.readout.discriminant import (
    discriminant_directions,
    summed_in_standard_units,
)
from training.cedar.readout.vocabulary import ReadoutRows, margins, readout_input
from training.core.artifacts import TransformArtifact

Linear = tuple[np.ndarray, np.ndarray]


def readings(rows: ReadoutRows, logistic: Linear, shrinkages: list[float]) -> dict[str, Linear]:
    """The arms' (weight, offset) (module doc): the logistic, then the discriminant and the
    sum at each shrinkage λ."""
    arms = {"logistic": logistic}
    for shrinkage in shrinkages:
        discriminant = discriminant_directions(rows.train_x, rows.train_mentions, shrinkage)
        arms[f"discriminant, λ = {shrinkage:g}"] = discriminant
        arms[f"sum, λ = {shrinkage:g}"] = summed_in_standard_units(
            [logistic, discriminant], rows.train_x
        )
    return arms


def gallery_rows(
    cache: Path, split: str, cedar: TransformArtifact, words: list[str]
) -> tuple[np.ndarray, np.ndarray, list[int], np.ndarray]:
    """(x̃, the judged words' relevance [N, W'], their readout columns, the keyword's
    allowed [N, W']) of a cache's split, over the judged words the readout learnt."""
    g = load_split_rows(cache)
    rows = g.rows(split)
    vocab, relevant, judged = judged_words(g, rows)
    index = {w: i for i, w in enumerate(words)}
    kept = [j for j in judged if vocab.words[j] in index]
    mentions = [vocab.mentions(t) for t in g.texts(rows)]
    keyword = np.array([[j in m for j in kept] for m in mentions], dtype=bool)
    x = readout_input(g.embeddings[rows], "dense", cedar.rotation, cedar.mean, 32)
    wanted = relevant[:, kept].toarray().astype(bool)
    return x, wanted, [index[vocab.words[j]] for j in kept], keyword


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, default=Path("runs/demo/cache-flickr8k-minilm"))
    parser.add_argument("--cedar", type=Path, default=Path("runs/demo/cedar-flickr8k"))
    parser.add_argument("--other", type=Path, default=Path("runs/comp20k-minilm"))
    parser.add_argument(
        "--shrinkage",
        type=float,
        nargs="+",
        default=None,
        help="λ values to try (default: the artifact's readout config's)",
    )
    parser.add_argument("--threads", type=int, default=min(4, len(os.sched_getaffinity(0))))
    parser.add_argument("--json", type=Path, default=Path("runs/bench/readout_readings.json"))
    args = parser.parse_args()
    data, cedar, config, rows = artifact_rows(args.cache, args.cedar, discriminant=False)
    model = train(rows, cedar.mean, config, 0, args.threads)
    logistic = tuple(t.numpy() for t in model["best"])
    groups = groups_of(data, data.rows("val"))
    galleries = {  # the in-corpus val rows picked the cuts: the halves are their held-out reading
        label: gallery_rows(path, split, cedar, rows.words)
        for label, path, split in (
            ("in-corpus test", args.cache, "test"),
            ("cross-corpus val", args.other, "val"),
            ("cross-corpus test", args.other, "test"),
        )
    }
    out: dict[str, Any] = {"cache": str(args.cache), "other": str(args.other), "arms": {}}
    shrinkages = args.shrinkage or [config.shrinkage]
    for arm, (weight, offset) in readings(rows, logistic, shrinkages).items():
        val = margins(rows.val_x, weight, offset)
        picked_on = margins(rows.train_x[rows.train_sample], weight, offset)
        train_rows = (picked_on, rows.train_relevant)
        found = calibrate(
            val, rows.val_relevant, rows.calibration, config.min_calibration, train_rows
        )
        record: dict[str, Any] = {
            "dev: val halves": dev_comparison(
                val, rows.val_relevant, groups, train_rows, config.min_calibration, config.seed
            )
        }
        for label, (x, wanted, columns, _) in galleries.items():
            allowed = margins(x, weight, offset)[:, columns] >= found["threshold"][columns]
            record[label] = macro(allowed, wanted)
        out["arms"][arm] = record
        print(arm, {k: v.get("f1") for k, v in record.items() if "f1" in v}, flush=True)
    out["keyword (own caption)"] = {
        label: macro(keyword, wanted)
        for label, (_, wanted, _, keyword) in galleries.items()
        if label.endswith("test")
    }
    publish(out, args.json)


if __name__ == "__main__":
    main()
