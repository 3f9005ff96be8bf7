"""The request-path timeline reads its stamps off a live server's path: every stage is
measured for a query on the event loop (object) and one in a lane (full)."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.service.request_path import gallery, query_vectors
from benchmarks.service.request_path.timeline import STAGES, timeline_part
from indexer.format.bundle import Bundle
from service.engine.search import SearchEngine


def test_every_stage_of_a_served_call_is_stamped(tmp_path: Path) -> None:
    engine = SearchEngine(Bundle.open(gallery(tmp_path, 600)), None)
    found = timeline_part(engine, query_vectors(4), rounds=1)
    assert set(found) == {"object", "full"}
    for stages in found.values():
        assert tuple(stages) == STAGES
        assert all(math.isfinite(v) for v in stages.values())
        assert all(stages[s] >= 0 for s in STAGES[:-1])  # spans between ordered stamps
