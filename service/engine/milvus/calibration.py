"""AUTO's funnel on a Milvus collection, calibrated by the local engine's rule
(service/engine/plans.py, `funnel.cheapest_funnel`) but measured on the engine itself.

    choices, direct_reasons = calibrated_funnels(scorer)   # when a replica opens a version

For each target prefix L (caption and full) of a bundle of at least `min_rows` rows: the
cheapest (S, F) whose recall@10 against the engine's own search at L, on `queries` gallery rows
searched leave-one-out, reaches `recall` at ≤ `max_cost_share` of a direct scan's floats
(N·S + k·F·L against N·L: every field a scan, as FLAT is).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from indexer.format.bundle import Bundle
from indexer.format.funnel import FunnelChoice, cheapest_funnel, rerank, without_self
from indexer.format.funnel_plans import calibration_skipped, no_funnel_reason
from indexer.milvus.store import ROW, MilvusStore, vector_field
from service.engine.milvus.entities import ReturnedRows, row_hits
from service.engine.milvus.expressions import rows_expression
from service.engine.scoring import EngineConfig

TOPK_MAX = 16_384  # Milvus's limit on hits per search
# queries per calibration search: one call for all of them would return up to queries·k·F
# vectors in one answer
CALIBRATION_CHUNK = 10
# a calibration call's deadline at least: no request waits on it, and on Milvus Lite ten
# queries' shortlists outlast a request's deadline (a server's 2 s: the demo's bundle then
# failed to start)
CALIBRATION_DEADLINE_S = 60.0


class CalibratedEngine(Protocol):
    """What the calibration reads of a scorer over a collection (`MilvusScorer` is one)."""

    config: EngineConfig
    bundle: Bundle
    contract: Any
    store: MilvusStore
    collection: str

    def engine_search(
        self,
        rotated: np.ndarray,
        length: int,
        k: int,
        expression: str,
        setting: str,
        fields: list[str],
        deadline_s: float | None = None,
    ) -> list[list[dict[str, Any]]]: ...


def calibrated_funnels(scorer: CalibratedEngine) -> tuple[dict[int, FunnelChoice], dict[int, str]]:
    """The funnel chosen per target prefix, and why AUTO searches the others directly."""
    config, rows = scorer.config.funnel, scorer.bundle.rows
    skipped = calibration_skipped(config, rows)
    choices: dict[int, FunnelChoice] = {}
    direct: dict[int, str] = {}
    for length in sorted({scorer.contract[g] for g in config.targets}):
        choice = None if skipped else _calibrated(scorer, length)
        if choice is None:
            direct[length] = skipped or no_funnel_reason(config)
        else:
            choices[length] = choice
    return choices, direct


def _calibrated(
    scorer: CalibratedEngine, length: int, k: int = 10, seed: int = 0
) -> FunnelChoice | None:
    config, total = scorer.config.funnel, scorer.bundle.rows
    picked = np.sort(
        np.random.default_rng(seed).choice(total, min(config.queries, total), replace=False)
    )
    full = vector_field(max(scorer.bundle.prefix_lengths))
    store = scorer.store
    found = store.call(
        "reading calibration rows",
        store.client.query,
        scorer.collection,
        filter=rows_expression(picked),
        output_fields=[ROW, full],
        limit=len(picked),
        deadline_s=deadline(scorer),
    )
    by_row = {int(h[ROW]): np.asarray(h[full], dtype=np.float32) for h in found}
    rotated = np.stack([by_row[int(r)] for r in picked])
    truth = without_self(_ranked_rows(scorer, rotated, length, k + 1), picked, k)
    costs = sorted(
        ((total * s + k * f * length) / (total * length), s, f, "")
        for s in scorer.bundle.prefix_lengths
        if s < length
        for f in config.factors
    )

    def funnel_rows(s: int, f: int, _: str) -> np.ndarray:
        shortlisted = min((k + 1) * f, TOPK_MAX)
        answers = chunked_search(scorer, rotated, s, shortlisted, [ROW, vector_field(length)])
        found = []
        for answer, query in zip(answers, rotated, strict=True):
            shortlist = row_hits(answer, shortlisted)
            returned = ReturnedRows(shortlist.fields, length)
            found.append(rerank(returned, query, shortlist.rows, length, k + 1)[1][0])
        return np.stack(found)

    return cheapest_funnel(
        costs, funnel_rows, truth, picked, k, config.recall, config.max_cost_share
    )


def _ranked_rows(scorer: CalibratedEngine, rotated: np.ndarray, length: int, k: int) -> np.ndarray:
    answers = chunked_search(scorer, rotated, length, k, [ROW])
    return np.array([[int(h[ROW]) for h in a] + [-1] * (k - len(a)) for a in answers])


def deadline(scorer: CalibratedEngine) -> float:
    """A calibration call's deadline: the store's, or CALIBRATION_DEADLINE_S if longer."""
    return max(scorer.store.timeout_s, CALIBRATION_DEADLINE_S)


def chunked_search(
    scorer: CalibratedEngine, rotated: np.ndarray, length: int, k: int, fields: list[str]
) -> list[list[dict[str, Any]]]:
    """Unfiltered engine searches of the queries [Q, D], CALIBRATION_CHUNK queries a call, each
    with the calibration's deadline, answers in the queries' order."""
    answers: list[list[dict[str, Any]]] = []
    for start in range(0, len(rotated), CALIBRATION_CHUNK):
        chunk = rotated[start : start + CALIBRATION_CHUNK]
        answers.extend(scorer.engine_search(chunk, length, k, "", "", fields, deadline(scorer)))
    return answers
