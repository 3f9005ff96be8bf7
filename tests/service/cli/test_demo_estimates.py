"""The demo's first screen estimates each corpus by that corpus's own rates: within 25 % of what
a first run took on two cores (the runs the rates are calibrated to)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.cli.demo import plan_demo
from service.cli.demo_command import format_plan
from service.cli.demo_config import DemoConfig
from training.core.settings import StrataSettings

TOOK_S = {"compositional": 177.0, "flickr8k": 310.0}  # 2 min 57 s, 5 min 10 s
FLICKR8K_CAPTIONS = 40_460


def fresh(data: Path, runs: Path) -> StrataSettings:
    return StrataSettings(data_dir=data, runs_dir=runs)


def test_each_corpus_is_estimated_within_a_quarter_of_its_run(tmp_path: Path):
    flickr = tmp_path / "data" / "flickr8k"
    flickr.mkdir(parents=True)
    lines = (f"{i // 5:05d}.jpg#{i % 5}\tA dog runs ." for i in range(FLICKR8K_CAPTIONS))
    (flickr / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    plans = {
        "compositional": plan_demo(fresh(tmp_path / "none", tmp_path / "r1"), DemoConfig()),
        "flickr8k": plan_demo(fresh(tmp_path / "data", tmp_path / "r2"), DemoConfig()),
    }
    for corpus, plan in plans.items():
        assert plan.corpus == corpus
        assert plan.seconds == pytest.approx(TOOK_S[corpus], rel=0.25), format_plan(plan)
    # GraSP-VL trains on a sample of the same size on both: a second-scale stage on each
    grasp = {c: p.stages["grasp-vl"] for c, p in plans.items()}
    assert grasp["compositional"] == pytest.approx(grasp["flickr8k"], rel=0.25)
