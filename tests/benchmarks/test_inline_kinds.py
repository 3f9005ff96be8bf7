"""The inline-kinds benchmark reads where a live server ran each query of a cheap/dear mix
(where each kind runs is the batcher's rule, tested in
tests/service/serving/test_inline_on_loop.py)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.service.inline_kinds import placement_of
from benchmarks.service.request_path import gallery


def test_the_placement_part_reports_each_kinds_share_on_the_loop(tmp_path: Path) -> None:
    """Run as `--compare` runs it: in a process of its own, on a checkout's code (this one)."""
    shares = placement_of(None, gallery(tmp_path, 600), calls=4)
    kinds = ("object", "full", "object text", "scene text")
    assert set(shares) == {f"{kind} on the loop" for kind in kinds}
    assert all(0.0 <= share <= 1.0 for share in shares.values())
