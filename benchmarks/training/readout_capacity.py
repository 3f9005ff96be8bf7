"""Does a wider word readout find more? The linear readout (training.cedar.readout) against the
same readout with a hidden layer, in-corpus and cross-corpus, with the filter-quality metric
code of `strata eval cedar --gallery` (training.cedar.filter_quality).

Both arms learn from the `--cache` corpus's train rows, select their epoch on its val rows'
loss and calibrate per-word thresholds there (training.cedar.readout.cuts.calibrate), exactly as
`strata train cedar` does:
- hidden 0: the project's readout, logit_w = ⟨x̃, W_w⟩ + c_w (training.cedar.readout.fitting);
- hidden H: the same plus a residual ReLU layer, logit_w = ⟨x̃, W_w⟩ + c_w + ⟨relu(A x̃ + a),
  B_w⟩, B zero at the start (so it starts as the linear readout), trained jointly.
Each is then scored on every `--gallery`'s val and test rows: macro precision / recall / F1
over the gallery's judged words (relevance as `strata eval cedar --gallery` judges it).
Zero-shot words are left out of both arms, so both cover the same words. What a model choice
may read: the "val" record (the held-out precision and recall of the cross-fitted calibration,
mean over the words that have them) and another corpus's val rows, the cross-corpus dev split
(the training corpus's own val rows calibrated the thresholds: its val figures are not held
out).

Threads: torch runs `--threads` threads inside the seeded block (default: min(4, CPUs)).
Training pins 4 (training.core.seeding); on a 2-core machine a hidden layer of 1,024 then takes
about 1.7 s a step against 64 ms with 2 threads, oversubscribed.

`--anchor A …` repeats each arm at every anchor weight A (ReadoutConfig.anchor, the pull of W
towards the words' text directions; the artifact's own by default): a stronger pull keeps each
word nearer its text direction, the cosine filter's, which may carry over to another corpus
better than what Flickr8k's labels teach.

    python -m benchmarks.training.readout_capacity --hidden 0 1024 --anchor 0.001
    python -m benchmarks.training.readout_capacity --hidden 0 --epochs 12 \
        --anchor 0 0.0001 0.001 0.01 0.1 1
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.harness import benchmark_parser, publish
from training.cedar.data import SplitRows, load_split_rows
from training.cedar.filter_quality import filter_quality
from training.cedar.gallery_quality import embed_words, judged_words
from training.cedar.readout.cuts import calibrate
from training.cedar.readout.discriminant import with_discriminant
from training.cedar.readout.fitting import ReadoutTrainer, run_readout_loop
from training.cedar.readout.rows import vocabulary_rows
from training.cedar.readout.vocabulary import (
    ReadoutConfig,
    ReadoutRows,
    named_margins,
    readout_input,
    text_directions,
)
from training.core.artifacts import TransformArtifact
from training.core.seeding import seeded


class HiddenReadoutTrainer(ReadoutTrainer):
    """The readout's trainer with a residual hidden layer (module doc)."""

    def __init__(self, train, val, start, config: ReadoutConfig, hidden: int) -> None:
        super().__init__(train, val, start, config)
        d = start.shape[1]
        generator = torch.Generator().manual_seed(config.seed)
        self.inner = torch.nn.Parameter(torch.randn(hidden, d, generator=generator) / d**0.5)
        self.inner_bias = torch.nn.Parameter(torch.zeros(hidden))
        self.outer = torch.nn.Parameter(torch.zeros(len(start), hidden))
        parameters = [self.weight, self.offset, self.inner, self.inner_bias, self.outer]
        self.optimizer = torch.optim.Adam(parameters, lr=config.learning_rate)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(x @ self.inner.T + self.inner_bias)
        return x @ self.weight.T + self.offset + hidden @ self.outer.T

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.binary_cross_entropy_with_logits(self.logits(x), y)

    def snapshot(self) -> tuple[torch.Tensor, ...]:
        tensors = (self.weight, self.offset, self.inner, self.inner_bias, self.outer)
        return tuple(t.detach().clone() for t in tensors)


def logits_of(best: tuple[torch.Tensor, ...], x: np.ndarray) -> np.ndarray:
    weight, offset, *hidden = (t.numpy().astype(np.float32) for t in best)
    out = x @ weight.T + offset
    if hidden:
        inner, inner_bias, outer = hidden
        out += np.maximum(x @ inner.T + inner_bias, 0) @ outer.T
    return out


def train(rows, mean: np.ndarray, config: ReadoutConfig, hidden: int, threads: int) -> dict:
    start = (config.scale * text_directions(rows.word_embeddings, mean)).astype(np.float32)
    data = ((rows.train_x, rows.train_targets), (rows.val_x, rows.val_targets), start, config)
    with seeded(config.seed):
        torch.set_num_threads(threads)  # put back by seeded on leaving
        trainer = HiddenReadoutTrainer(*data, hidden) if hidden else ReadoutTrainer(*data)
        result = run_readout_loop(trainer, config)
    best = result.best
    if config.discriminant and not hidden:  # as fit_readout does
        summed = with_discriminant(
            tuple(t.numpy() for t in best), rows.train_x, rows.train_mentions, config.shrinkage
        )
        best = tuple(torch.from_numpy(a) for a in summed)
    found = calibrate(
        logits_of(best, rows.val_x),
        rows.val_relevant,
        rows.calibration,
        config.min_calibration,
        (logits_of(best, rows.train_x[rows.train_sample]), rows.train_relevant),
    )
    precision, recall = float(np.nanmean(found["precision"])), float(np.nanmean(found["recall"]))
    return {
        "best": best,
        "threshold": np.asarray(found["threshold"], dtype=np.float32),
        "val": {
            "best_epoch": result.state.best_round,
            "val_bce": min(h["val_bce"] for h in result.state.history),
            "held_out_precision": round(precision, 4),
            "held_out_recall": round(recall, 4),
            "seconds": round(result.state.seconds, 1),
        },
    }


def gallery_score(
    path: Path, split: str, cedar: TransformArtifact, words: list[str], model: dict
) -> dict:
    g = load_split_rows(path)
    test = g.rows(split)
    vocab, relevant, judged = judged_words(g, test)
    names = [vocab.words[w] for w in judged]
    classes = [vocab.classes[w] for w in judged]
    wanted = relevant[:, judged].T.toarray().astype(bool)
    x = readout_input(g.embeddings[test], "dense", cedar.rotation, cedar.mean, 32)
    scores, covered = named_margins(logits_of(model["best"], x) - model["threshold"], words, names)
    quality = filter_quality(scores >= 0, covered, wanted, classes)
    kept = ("words", "covered", "precision", "recall", "f1")
    return {c: {k: v for k, v in q.items() if k in kept} for c, q in quality.items()}


def artifact_rows(
    cache: Path, artifact: Path, **overrides: Any
) -> tuple[SplitRows, TransformArtifact, ReadoutConfig, ReadoutRows]:
    """The cache's rows, the CEDAR artifact, its readout config (with `overrides`) and the
    readout rows it learns from, as `strata train cedar` makes them."""
    data = load_split_rows(cache)
    cedar = TransformArtifact.load(artifact)
    config = ReadoutConfig.model_validate(
        {**cedar.extra.get("readout", {}).get("config", {}), **overrides}
    )
    _, rows = vocabulary_rows(
        data,
        cedar.rotation,
        cedar.mean,
        int(cedar.extra.get("k", 32)),
        lambda words: embed_words(words, data.encoder),
        config,
    )
    return data, cedar, config, rows


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, default=Path("runs/flickr-minilm"))
    parser.add_argument("--cedar", type=Path, default=Path("runs/cedar-flickr"))
    parser.add_argument(
        "--gallery",
        type=Path,
        nargs="+",
        default=[Path("runs/flickr-minilm"), Path("runs/comp20k-minilm")],
    )
    parser.add_argument("--hidden", type=int, nargs="+", default=[0, 1024])
    parser.add_argument(
        "--anchor", type=float, nargs="+", help="anchor weights (default: the artifact's)"
    )
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--threads", type=int, default=min(4, len(os.sched_getaffinity(0))))
    parser.add_argument("--json", type=Path, default=Path("runs/bench/readout_capacity.json"))
    args = parser.parse_args()
    _, cedar, config, rows = artifact_rows(args.cache, args.cedar, epochs=args.epochs)
    arms: dict[str, Any] = {}
    for hidden in args.hidden:
        for anchor in args.anchor or [config.anchor]:
            arm = (
                f"hidden {hidden}" if args.anchor is None else f"hidden {hidden}, anchor {anchor:g}"
            )
            model = train(
                rows, cedar.mean, config.model_copy(update={"anchor": anchor}), hidden, args.threads
            )
            arms[arm] = {"val": model["val"]}
            for split in ("val", "test"):
                arms[arm][f"gallery {split}"] = {
                    str(g): gallery_score(g, split, cedar, rows.words, model) for g in args.gallery
                }
            print(arm, arms[arm], flush=True)
    publish(
        {
            "cache": str(args.cache),
            "cedar": str(args.cedar),
            "epochs": args.epochs,
            "threads": args.threads,
            "words": len(rows.words),
            "arms": arms,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
