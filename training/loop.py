"""The one training loop: rounds of steps, model selection with patience, checkpoints, resume.

Every trainer (GraSP-VL, CEDAR, the SAE baselines, CoSAE) is a `Trainer`: it gives one
optimisation step, what happens at the start and the end of a round (an epoch, or for CoSAE a
validation interval), a copy of its best weights, and what to checkpoint. `run_loop` owns the
rest, identically for all of them:

- the schedule: `total_steps` steps in rounds of `steps_per_round` (the last may be shorter);
- the record of a round: the mean over its steps of every value the step returned, handed to
  `Trainer.end_round`, which adds its validation scores;
- selection (optional): a round whose monitored score beats the best so far (strictly) becomes
  the best and resets the patience; `patience` rounds without one stop the run. Rounds before
  `always_best_before` count as best whatever their score (a curriculum's early rounds);
- checkpoints (optional): after every round, atomically, with the fingerprints of the config
  and the data; a rerun with both the same continues from the last round, anything else starts
  afresh and says so;
- one progress bar over the steps, and one log line per round.
"""

from __future__ import annotations

import io
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import torch
from tqdm import tqdm

from training.core.files import atomic_write_bytes

log = logging.getLogger(__name__)

# the layout of a checkpoint's payload; a checkpoint of another layout is not resumed
CHECKPOINT_LAYOUT = "strata.loop/1"
CHECKPOINT_NAME = "checkpoint.pt"


def work_folder(out: Path, work: Path | None = None) -> Path:
    """Where a training command keeps its checkpoints: `work`, or OUT.work beside the artifact."""
    return work or out.with_name(out.name + ".work")


def save_checkpoint(path: Path, config: str, data: str, payload: dict[str, Any]) -> None:
    """torch.save of `payload` plus the two fingerprints, replacing `path` atomically."""
    buffer = io.BytesIO()
    torch.save({"config": config, "data": data, **payload}, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: Path, config: str, data: str, device: str) -> dict[str, Any] | None:
    """The payload at `path` when it was made with this config and data, else None."""
    if not path.is_file():
        return None
    saved = torch.load(path, map_location=device, weights_only=True)
    if saved.get("config") != config or saved.get("data") != data:
        log.warning("ignoring %s: made with another config or data", path)
        return None
    if saved.get("layout") != CHECKPOINT_LAYOUT:
        log.warning("ignoring %s: written by another version of the training loop", path)
        return None
    return saved


@dataclass(frozen=True)
class Selection:
    """Model selection on a validation score: `monitor` (a key of the round's record), whether
    higher or lower is better, and the rounds without gain after which training stops."""

    monitor: str
    mode: Literal["max", "min"]
    patience: int
    always_best_before: int = 0

    def signed(self, value: float) -> float:
        """The score as a quantity to maximise (negation is exact, so the order is kept)."""
        return value if self.mode == "max" else -value


@dataclass(frozen=True)
class Schedule:
    total_steps: int
    steps_per_round: int

    def round_end(self, step: int) -> int:
        """The step after the last of the round that `step` is in."""
        return min((step // self.steps_per_round + 1) * self.steps_per_round, self.total_steps)


@dataclass(frozen=True)
class Checkpointing:
    """Where the checkpoint lives and the fingerprints a resumed run must match."""

    folder: Path
    config: str
    data: str
    device: str

    @property
    def path(self) -> Path:
        return self.folder / CHECKPOINT_NAME


@dataclass
class LoopState:
    """What the loop knows; checkpointed as a plain dict (`as_dict`, `of`)."""

    step: int = 0
    rounds: int = 0
    best: float = -math.inf  # Selection.signed of the best score
    best_round: int = 0
    bad_rounds: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    initial: dict[str, float] | None = None  # the record of the start, when it is scored
    seconds: float = 0.0  # training time over every run that led here (resumes add up)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def of(cls, saved: dict[str, Any]) -> LoopState:
        return cls(**saved)


class Trainer(Protocol):
    """What a training method plugs into `run_loop`."""

    label: str  # for the progress bar and the log

    def begin_round(self, index: int) -> None:
        """Before the steps of round `index` (0-based): shuffle, seed the round's generators."""

    def step(self, step: int) -> dict[str, float]:
        """One optimisation step (`step` counts from 0 over the whole run); the values to
        average over the round (losses, diagnostics)."""

    def end_round(self, index: int, step: int, means: dict[str, float]) -> dict[str, float]:
        """The round's record from the means of its steps (validation scores added); `step`
        is the number of steps done."""

    def initial_record(self) -> dict[str, float] | None:
        """The record of the untrained start when it competes in selection, else None."""

    def snapshot(self) -> Any:
        """A detached copy of the weights selection keeps."""

    def checkpoint_state(self) -> dict[str, Any]:
        """Everything to resume from (weights, optimiser, generators), tensors or plain data."""

    def load_checkpoint_state(self, saved: dict[str, Any]) -> None:
        """Put back what `checkpoint_state` returned."""


class SkewParameterTrainer:
    """The part of a `Trainer` shared by the rotation learners (GraSP-VL's Cayley(A), CEDAR's
    exp(A − Aᵀ)): the weights are the strict upper triangle of A, `upper` [D(D − 1)/2], from
    zero (R = R₀), learnt by Adam."""

    def init_upper(self, dim: int, device: str, learning_rate: float) -> None:
        self.upper = torch.zeros(dim * (dim - 1) // 2, device=device, requires_grad=True)
        self.optimizer = torch.optim.Adam([self.upper], lr=learning_rate)

    def begin_round(self, index: int) -> None:
        pass

    def initial_record(self) -> dict[str, float] | None:
        return None

    def snapshot(self) -> torch.Tensor:
        return self.upper.detach().clone()

    def checkpoint_state(self) -> dict[str, Any]:
        return {"upper": self.upper.detach(), "optimizer": self.optimizer.state_dict()}

    def load_checkpoint_state(self, saved: dict[str, Any]) -> None:
        with torch.no_grad():
            self.upper.copy_(saved["upper"])
        self.optimizer.load_state_dict(saved["optimizer"])


@dataclass
class LoopResult:
    state: LoopState
    best: Any  # the snapshot of the best round (the last round's without selection)


def run_loop(
    trainer: Trainer,
    schedule: Schedule,
    selection: Selection | None = None,
    checkpointing: Checkpointing | None = None,
    progress: bool = True,
) -> LoopResult:
    """Train `trainer` to the end of `schedule` or until selection's patience runs out."""
    state, best = LoopState(), trainer.snapshot()
    if selection is not None:
        initial = trainer.initial_record()
        if initial is not None:
            state.initial, state.best = initial, selection.signed(initial[selection.monitor])
    saved = None
    if checkpointing is not None:
        saved = load_checkpoint(
            checkpointing.path, checkpointing.config, checkpointing.data, checkpointing.device
        )
    if saved is not None:
        trainer.load_checkpoint_state(saved["trainer"])
        state, best = LoopState.of(saved["loop"]), saved["best"]
        log.info("resuming %s training at step %d", trainer.label, state.step)

    bar = tqdm(
        total=schedule.total_steps,
        initial=state.step,
        desc=trainer.label,
        disable=not progress,
        leave=False,
    )
    started = time.perf_counter()
    while state.step < schedule.total_steps and (
        selection is None or state.bad_rounds < selection.patience
    ):
        index, end = state.rounds, schedule.round_end(state.step)
        trainer.begin_round(index)
        sums: dict[str, float] = {}
        for step in range(state.step, end):
            for name, value in trainer.step(step).items():
                sums[name] = sums.get(name, 0.0) + value
            if progress:  # drawn at tqdm's own refreshes (spaced in time) and at a round's end
                done = step + 1 - state.step
                postfix = {n: f"{v / done:.4g}" for n, v in sums.items()}
                bar.set_postfix(postfix, refresh=step + 1 == end)
            bar.update(1)
        means = {name: value / (end - state.step) for name, value in sums.items()}
        state.step, state.rounds = end, index + 1
        record = trainer.end_round(index, end, means)
        state.history.append(record)
        log.info(
            "%s round %d: %s",
            trainer.label,
            state.rounds,
            json.dumps({k: round(v, 4) for k, v in record.items()}),
        )
        if selection is None:
            best = None
        elif state.rounds < selection.always_best_before or (
            selection.signed(record[selection.monitor]) > state.best
        ):
            state.best, state.best_round, state.bad_rounds = (
                selection.signed(record[selection.monitor]),
                state.rounds,
                0,
            )
            best = trainer.snapshot()
        else:
            state.bad_rounds += 1
        state.seconds += time.perf_counter() - started
        started = time.perf_counter()
        if checkpointing is not None:
            save_checkpoint(
                checkpointing.path,
                checkpointing.config,
                checkpointing.data,
                {
                    "layout": CHECKPOINT_LAYOUT,
                    "trainer": trainer.checkpoint_state(),
                    "best": best,
                    "loop": state.as_dict(),
                },
            )
    bar.close()
    return LoopResult(state, trainer.snapshot() if selection is None else best)
