"""Training the vocabulary readout (training.cedar.readout): its `Trainer` for the project's
loop, and `fit_readout`, which trains, calibrates the thresholds and measures the words held
out. Kept apart from the readout's pure functions so that serving a readout loads no torch."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from training.cedar.naming import OTHER_CAPTIONS
from training.cedar.readout.cuts import calibrate
from training.cedar.readout.discriminant import with_discriminant
from training.cedar.readout.vocabulary import (
    ReadoutConfig,
    ReadoutRows,
    VocabularyReadout,
    active_share,
    margins,
    text_directions,
)
from training.core.seeding import seeded
from training.loop import LoopResult, Schedule, Selection, run_loop


class ReadoutTrainer:
    """BCE on soft targets with an anchor to the text directions, for `run_loop`."""

    label = "readout"

    def __init__(
        self,
        train: tuple[np.ndarray, np.ndarray],
        val: tuple[np.ndarray, np.ndarray],
        start: np.ndarray,
        config: ReadoutConfig,
    ) -> None:
        self.config = config
        self.x, self.y = (torch.as_tensor(a) for a in train)
        self.val_x, self.val_y = (torch.as_tensor(a) for a in val)
        self.start = torch.as_tensor(start)
        self.weight = torch.nn.Parameter(self.start.clone())
        self.offset = torch.nn.Parameter(torch.full((len(start),), config.init_offset))
        self.optimizer = torch.optim.Adam([self.weight, self.offset], lr=config.learning_rate)
        self.batches = max(1, -(-len(self.x) // config.batch_size))

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = x @ self.weight.T + self.offset
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, y)

    def begin_round(self, index: int) -> None:
        generator = torch.Generator().manual_seed(self.config.seed + index)
        self.order = torch.randperm(len(self.x), generator=generator)

    def step(self, step: int) -> dict[str, float]:
        within, size = step % self.batches, self.config.batch_size
        rows = self.order[within * size : (within + 1) * size]
        bce = self.loss(self.x[rows], self.y[rows])
        pull = ((self.weight - self.start) ** 2).sum(dim=1).mean()
        loss = bce + self.config.anchor * pull
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"bce": bce.item(), "anchor": pull.item()}

    def end_round(self, index: int, step: int, means: dict[str, float]) -> dict[str, float]:
        with torch.no_grad():
            val = self.loss(self.val_x, self.val_y).item()
        return {"epoch": index + 1, **means, "val_bce": val}

    def initial_record(self) -> dict[str, float] | None:
        return None

    def snapshot(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weight.detach().clone(), self.offset.detach().clone()

    def checkpoint_state(self) -> dict[str, Any]:
        return {
            "weight": self.weight.detach(),
            "offset": self.offset.detach(),
            "optimizer": self.optimizer.state_dict(),
        }

    def load_checkpoint_state(self, saved: dict[str, Any]) -> None:
        with torch.no_grad():
            self.weight.copy_(saved["weight"])
            self.offset.copy_(saved["offset"])
        self.optimizer.load_state_dict(saved["optimizer"])


def run_readout_loop(
    trainer: ReadoutTrainer, config: ReadoutConfig, progress: bool = True
) -> LoopResult:
    """A readout trainer's loop: `config.epochs` rounds of minibatches, the best round by the
    val rows' loss, stopped after `config.patience` rounds without a better one."""
    return run_loop(
        trainer,
        Schedule(config.epochs * trainer.batches, trainer.batches),
        Selection("val_bce", "min", config.patience),
        None,
        progress,
    )


def fit_readout(
    rows: ReadoutRows, mean: np.ndarray, config: ReadoutConfig, progress: bool = True
) -> tuple[VocabularyReadout, dict[str, Any]]:
    """Train the readout, add the discriminant directions (with `config.discriminant`),
    calibrate its thresholds, measure it held out (module doc)."""
    start = config.scale * text_directions(rows.word_embeddings, mean)
    with seeded(config.seed):
        trainer = ReadoutTrainer(
            (rows.train_x, rows.train_targets),
            (rows.val_x, rows.val_targets),
            start.astype(np.float32),
            config,
        )
        result = run_readout_loop(trainer, config, progress)
    weight, offset = (t.numpy().astype(np.float32) for t in result.best)
    if config.discriminant:
        weight, offset = with_discriminant(
            (weight, offset), rows.train_x, rows.train_mentions, config.shrinkage
        )
    logits = margins(rows.val_x, weight, offset)
    train = (margins(rows.train_x[rows.train_sample], weight, offset), rows.train_relevant)
    found = calibrate(logits, rows.val_relevant, rows.calibration, config.min_calibration, train)
    threshold = np.asarray(found["threshold"], dtype=np.float32)
    finite = np.where(np.isfinite(threshold), threshold, np.float32(1e6))
    readout = VocabularyReadout(
        words=list(rows.words),
        classes=list(rows.classes),
        weight=weight,
        offset=(offset - finite).astype(np.float32),
        threshold=finite,
        own_threshold=np.asarray(found["own"], dtype=bool),
        precision=[None if np.isnan(p) else round(float(p), 4) for p in found["precision"]],
        recall=[None if np.isnan(r) else round(float(r), 4) for r in found["recall"]],
        support=[int(s) for s in rows.train_support],
        source=config.source,
        text=text_directions(rows.word_embeddings, mean),
    )
    readout.frequency = active_share(readout, rows.train_x)
    info = {
        "words": len(rows.words),
        "own_thresholds": int(readout.own_threshold.sum()),
        "global_threshold": float(found["global"]),
        "discriminant": config.discriminant,
        "epochs_run": result.state.rounds,
        "best_epoch": result.state.best_round,
        "seconds": round(result.state.seconds, 3),
        "history": result.state.history,
        "relevance": f"at least {OTHER_CAPTIONS} other captions of the image use the word",
    }
    return readout, info
