"""The shared training loop: rounds, selection with patience, checkpoints and resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from training.loop import (
    CHECKPOINT_NAME,
    Checkpointing,
    Schedule,
    Selection,
    load_checkpoint,
    run_loop,
    save_checkpoint,
    work_folder,
)


class Scripted:
    """A trainer whose validation scores are given in advance; its weight counts the steps."""

    label = "scripted"

    def __init__(self, scores: list[float], initial: float | None = None) -> None:
        self.scores, self.initial, self.weight, self.rounds_begun = scores, initial, 0, []

    def begin_round(self, index: int) -> None:
        self.rounds_begun.append(index)

    def step(self, step: int) -> dict[str, float]:
        self.weight += 1
        return {"loss": float(step)}

    def end_round(self, index: int, step: int, means: dict[str, float]) -> dict[str, float]:
        return {
            "round": index + 1,
            "step": step,
            "loss": means["loss"],
            "score": self.scores[index],
        }

    def initial_record(self) -> dict[str, float] | None:
        return None if self.initial is None else {"round": 0, "score": self.initial}

    def snapshot(self) -> int:
        return self.weight

    def checkpoint_state(self) -> dict[str, Any]:
        return {"weight": self.weight}

    def load_checkpoint_state(self, saved: dict[str, Any]) -> None:
        self.weight = saved["weight"]


def test_rounds_average_their_steps_and_the_last_may_be_shorter():
    trainer = Scripted([1.0, 2.0, 3.0])
    result = run_loop(trainer, Schedule(total_steps=7, steps_per_round=3), progress=False)
    assert [r["step"] for r in result.state.history] == [3, 6, 7]
    assert [r["loss"] for r in result.state.history] == [1.0, 4.0, 6.0]  # means of 0..2, 3..5, 6
    assert result.best == 7 and result.state.rounds == 3


def test_patience_stops_and_the_best_round_is_kept():
    trainer = Scripted([0.5, 0.4, 0.45, 0.41, 0.3])
    selection = Selection("score", "min", patience=2)
    result = run_loop(trainer, Schedule(10, 2), selection, progress=False)
    assert result.state.rounds == 4 and result.state.best_round == 2
    assert result.best == 4  # the weight after round 2's steps


def test_the_start_competes_when_it_is_scored():
    trainer = Scripted([0.1, 0.2], initial=0.9)
    result = run_loop(trainer, Schedule(4, 2), Selection("score", "max", 1), progress=False)
    assert result.state.best_round == 0 and result.best == 0
    assert result.state.initial == {"round": 0, "score": 0.9}


def test_rounds_before_always_best_before_count_as_best():
    trainer = Scripted([0.1, 0.5, 0.2, 0.3])  # lower is better, but round 2 is in a curriculum
    selection = Selection("score", "min", patience=5, always_best_before=3)
    result = run_loop(trainer, Schedule(4, 1), selection, progress=False)
    assert result.state.best_round == 3  # 0.2 beats the 0.5 round 2 was forced to
    assert result.best == 3


def test_resume_continues_after_the_last_round_and_ends_the_same(tmp_path: Path):
    checkpointing = Checkpointing(tmp_path, "config", "data", "cpu")
    scores = [0.5, 0.4, 0.3, 0.2]
    short = run_loop(Scripted(scores), Schedule(4, 2), None, checkpointing, progress=False)
    assert short.state.step == 4 and (tmp_path / CHECKPOINT_NAME).is_file()
    resumed_trainer = Scripted(scores)
    resumed = run_loop(resumed_trainer, Schedule(8, 2), None, checkpointing, progress=False)
    straight = run_loop(Scripted(scores), Schedule(8, 2), progress=False)
    assert resumed_trainer.rounds_begun == [2, 3]
    assert resumed.state.history == straight.state.history and resumed.best == straight.best


def test_a_checkpoint_of_other_config_data_or_layout_is_ignored(tmp_path: Path):
    path = tmp_path / CHECKPOINT_NAME
    save_checkpoint(path, "config", "data", {"layout": "strata.loop/1", "x": torch.ones(1)})
    assert load_checkpoint(path, "config", "data", "cpu") is not None
    assert load_checkpoint(path, "other", "data", "cpu") is None
    assert load_checkpoint(path, "config", "other", "cpu") is None
    save_checkpoint(path, "config", "data", {"x": torch.ones(1)})  # an older loop's payload
    assert load_checkpoint(path, "config", "data", "cpu") is None
    run = run_loop(
        Scripted([1.0]),
        Schedule(1, 1),
        None,
        Checkpointing(tmp_path, "config", "data", "cpu"),
        progress=False,
    )
    assert run.state.rounds == 1  # started afresh


def test_work_folder_defaults_beside_the_artifact(tmp_path: Path):
    assert work_folder(tmp_path / "art") == tmp_path / "art.work"
    assert work_folder(tmp_path / "art", tmp_path / "w") == tmp_path / "w"


@pytest.mark.parametrize("mode", ["min", "max"])
def test_signed_scores_keep_the_order(mode: str):
    selection = Selection("score", mode, 1)  # type: ignore[arg-type]
    better, worse = (0.1, 0.2) if mode == "min" else (0.2, 0.1)
    assert selection.signed(better) > selection.signed(worse)
