"""Where a word concept's cut is picked: on the val rows alone, or on the train and val rows.

The readout (training.cedar.readout) is trained as `strata train cedar` trains it, then:

1. **Dev comparison** of the two calibration rules on the `--cache` corpus's val rows, which no
   cut of the comparison may read twice: the val rows are split in two halves by image
   (training.cedar.readout.cuts.split_calibration); each rule picks every word's cut on one half
   (`calibrate`, its own cross-fitting inside that half) — the rule before on that half alone,
   the default on that half and the train rows (training.cedar.readout.cuts.calibration_sample) —
   and is scored on the other half, both ways: macro precision / recall / F1 over the words
   with at least `min_calibration` relevant rows in the scored half (strict relevance: at
   least 2 other captions of the image use the word).
2. **Bounds on the test rows**, with the judged words and metric code of `strata eval cedar
   --gallery` (training.cedar.filter_quality): per word, F1 at the artifact's own cut, the
   best F1 any cut of the readout's scores reaches there (read off the test labels: a bound
   no rule can reach), the same for the cosine of the row with the word's text direction, and
   the keyword on the row's own caption; by the words' number of relevant test rows. And how
   far a cut rule could still go on labels: each word cut on the rows its artifact cut was
   picked on plus one half of the test images, with their labels, and scored on the other half,
   both ways, counts pooled, against the artifact's own cut. Where the two agree, more labels
   from the test rows' own distribution move no cut, and the best cut on all the test labels
   is that choice's luck on a few positives, not a reachable bound.

    python -m benchmarks.training.readout_cuts --cache runs/demo/cache-flickr8k-minilm \
        --cedar runs/demo/cedar-flickr8k
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from benchmarks.training.readout_capacity import artifact_rows, logits_of, train
from training.cedar.data import groups_of, load_split_rows
from training.cedar.gallery_quality import embed_words, judged_words
from training.cedar.readout.cuts import (
    best_cuts,
    calibrate,
    held_out,
    held_out_f1,
    split_calibration,
)
from training.cedar.readout.vocabulary import (
    named_margins,
    readout_input,
    text_directions,
)
from training.core.artifacts import TransformArtifact
from training.core.metrics import unit_rows

BINS = ((10, 15), (15, 25), (25, 50), (50, 100), (100, None))  # relevant test rows of a word


def macro(allowed: np.ndarray, relevant: np.ndarray) -> dict[str, float]:
    """Macro precision / recall / F1 over the columns (words) of bool [N, W] matrices."""
    hits = (allowed & relevant).sum(axis=0)
    kept, wanted = allowed.sum(axis=0), relevant.sum(axis=0)
    f1 = 2 * hits / np.maximum(kept + wanted, 1)
    return {
        "precision": round(float((hits / np.maximum(kept, 1)).mean()), 4),
        "recall": round(float((hits / np.maximum(wanted, 1)).mean()), 4),
        "f1": round(float(f1.mean()), 4),
        "words": int(allowed.shape[1]),
    }


def dev_comparison(
    val_logits: np.ndarray,
    val_relevant: np.ndarray,
    groups: list[str],
    train: tuple[np.ndarray, np.ndarray],
    min_calibration: int,
    seed: int,
) -> dict[str, Any]:
    """Each rule cut on one half of the val rows, scored on the other, both ways (module doc)."""
    halves = split_calibration(groups, seed)
    out: dict[str, Any] = {}
    for fit, label in ((halves, "first half → second"), (~halves, "second half → first")):
        inner = split_calibration([g for g, f in zip(groups, fit, strict=True) if f], seed + 1)
        scored = ~fit
        words = val_relevant[scored].sum(axis=0) >= min_calibration
        out[label] = {}
        for rule, extra in (("val rows alone (before)", None), ("train and val rows", train)):
            found = calibrate(val_logits[fit], val_relevant[fit], inner, min_calibration, extra)
            allowed = val_logits[scored] >= found["threshold"]
            out[label][rule] = macro(allowed[:, words], val_relevant[scored][:, words])
    return out


def cut_with_test_labels(
    margins: np.ndarray,
    wanted: np.ndarray,
    halves: np.ndarray,
    calibration: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """Per word (column of the [N, W] test `margins`): held-out F1 of its best cut on the
    `calibration` rows (margins, relevance) and one half of the test rows, scored on the other
    half, both ways, counts pooled (the artifact's own cut, so pooled, scores its F1 on all the
    test rows)."""
    counts = np.zeros((3, margins.shape[1]))
    for fit in (halves, ~halves):
        cuts, _ = best_cuts(
            np.concatenate([calibration[0], margins[fit]]),
            np.concatenate([calibration[1], wanted[fit]]),
        )
        counts += held_out(margins[~fit], wanted[~fit], cuts)
    return held_out_f1(*counts)


def bounds_on_test(
    cache: Path,
    cedar: TransformArtifact,
    readout: tuple[list[str], dict[str, Any]],
    calibration: tuple[np.ndarray, np.ndarray],
) -> dict[str, Any]:
    """Per-word F1 of the readout at its cuts, the best cut of its scores and of the text
    direction's cosine on the test labels, a cut picked with half the test labels too
    (`calibration`: the logits and relevance of the rows the artifact's cuts were picked on),
    and the keyword; over all judged words the readout learnt, and by relevant test rows
    (module doc)."""
    words, model = readout
    g = load_split_rows(cache)
    test = g.rows("test")
    vocab, relevant, judged = judged_words(g, test)
    names = [vocab.words[w] for w in judged]
    x = readout_input(g.embeddings[test], "dense", cedar.rotation, cedar.mean, 32)
    margins, covered = named_margins(logits_of(model["best"], x) - model["threshold"], words, names)
    names = [n for n, c in zip(names, covered, strict=True) if c]
    wanted = relevant[:, judged].toarray().astype(bool)[:, covered]
    margins = margins[covered].T  # [N, W]
    picked_on, _ = named_margins(calibration[0] - model["threshold"], words, names)
    picked_relevance = calibration[1][:, [words.index(n) for n in names]]
    labelled = cut_with_test_labels(
        margins,
        wanted,
        split_calibration(groups_of(g, test), 0),
        (picked_on.T, picked_relevance),
    )
    directions = text_directions(embed_words(names, g.encoder), cedar.mean)
    cosines = unit_rows(np.asarray(g.embeddings[test], np.float32) - cedar.mean) @ directions.T
    mentions = [vocab.mentions(t) for t in g.texts(test)]
    ids = [vocab.words.index(n) for n in names]
    own = np.array([[i in m for i in ids] for m in mentions])
    hits = (margins >= 0) & wanted
    at_cut = 2 * hits.sum(axis=0) / np.maximum((margins >= 0).sum(axis=0) + wanted.sum(axis=0), 1)
    keyword = 2 * (own & wanted).sum(axis=0) / np.maximum(own.sum(axis=0) + wanted.sum(axis=0), 1)
    per_word = {
        "readout at its cuts": at_cut,
        "readout, best cut on the test labels": best_cuts(margins, wanted)[1],
        "readout, cut with half the test labels too (held out by halves)": labelled,
        "text direction's cosine, best cut on the test labels": best_cuts(cosines, wanted)[1],
        "keyword (own caption)": keyword,
    }
    count = wanted.sum(axis=0)
    bins = {}
    for low, high in BINS:
        mask = (count >= low) & (count < (high or np.inf))
        label = f"{low}–{high - 1}" if high else f"≥ {low}"
        bins[label] = {"words": int(mask.sum())} | {
            k: round(float(v[mask].mean()), 4) for k, v in per_word.items()
        }
    worst = np.argsort(at_cut - keyword)[:10]
    return {
        "words": len(names),
        "f1": {k: round(float(v.mean()), 4) for k, v in per_word.items()},
        "by_relevant_rows": bins,
        "most_behind_the_keyword": {
            names[i]: {k: round(float(v[i]), 3) for k, v in per_word.items()} for i in worst
        },
    }


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, default=Path("runs/demo/cache-flickr8k-minilm"))
    parser.add_argument("--cedar", type=Path, default=Path("runs/demo/cedar-flickr8k"))
    parser.add_argument("--threads", type=int, default=min(4, len(os.sched_getaffinity(0))))
    parser.add_argument("--json", type=Path, default=Path("runs/bench/readout_cuts.json"))
    args = parser.parse_args()
    data, cedar, config, rows = artifact_rows(args.cache, args.cedar)
    model = train(rows, cedar.mean, config, 0, args.threads)
    val = data.rows("val")
    train_rows = (logits_of(model["best"], rows.train_x[rows.train_sample]), rows.train_relevant)
    val_logits = logits_of(model["best"], rows.val_x)
    picked_on = (
        np.concatenate([train_rows[0], val_logits]),
        np.concatenate([train_rows[1], rows.val_relevant]),
    )
    publish(
        {
            "cache": str(args.cache),
            "cedar": str(args.cedar),
            "dev": dev_comparison(
                val_logits,
                rows.val_relevant,
                groups_of(data, val),
                train_rows,
                config.min_calibration,
                config.seed,
            ),
            "test": bounds_on_test(args.cache, cedar, (rows.words, model), picked_on),
        },
        args.json,
    )


if __name__ == "__main__":
    main()
