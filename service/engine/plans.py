"""Which plan a search runs (direct or funnel), and running a funnel over a loaded bundle.

A query's `SearchPlan` (service/results.py) is "direct", "funnel" or "auto":

- direct: one search of the target prefix's index (what every search did before the funnel);
- funnel (indexer/format/funnel.py): shortlist k·F rows at a prefix S below the target L,
  rerank them exactly at L from the bundle's exact rows. S and F are the request's, else the
  calibrated ones (below), else S = the contract's shortest prefix and F = `default_factor`;
- auto, the default: the funnel where it was measured to pay, else direct. The rule
  (indexer/format/funnel_plans.py, run when the version is built and recorded in its
  manifest; run when the engine loads a version that recorded none, or none for the engine's
  FunnelConfig): on a bundle of at least `min_rows` rows, a funnel for the caption and full
  prefixes (and the prefixes a shared store serves) — the cheapest S and F, by floats scanned,
  whose recall@10 against exact search at L on 100 held-out gallery rows is ≥ `recall`, 0.99,
  at ≤ `max_cost_share` of a direct scan's floats; auto funnels to those targets when a choice
  was found, and searches directly otherwise (other granularities, small bundles, no exact
  rows to rerank from, no funnel reaching the recall). A filtered query that allows at most
  `exact_max` rows is scored exactly by the direct plan, which auto then keeps.

The funnel is applied inside the concept filter (the shortlist is a filtered search at S, so it
holds only allowed rows); a deletion writes a new version whose rows and exact rows are those
kept, so neither needs anything of the funnel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from indexer.format.bundle import Bundle
from indexer.format.funnel import ExactRows, FunnelChoice, funnel_search, rerank
from indexer.format.funnel_plans import (
    FunnelConfig,
    PlanInputs,
    calibrate_plans,
    recorded_plans,
)
from indexer.format.row_bitmaps import AllowedRows
from service.engine.filter_blocks import FilterBlocks
from service.engine.filtering import filtered_search
from service.errors import QueryError
from service.results import PlanKind, PlanRun, SearchQuery
from training.core.metrics import prefix_vectors


class Planner:
    """The plans of one loaded bundle: its indexes, the exact rows to rerank from, and the
    funnel per target prefix: recorded in the version at build time, else calibrated now
    (indexer/format/funnel_plans.py), once, when the engine loads the bundle."""

    def __init__(self, bundle: Bundle, config: FunnelConfig | None = None) -> None:
        self.config = config or FunnelConfig()
        self.rows = bundle.rows
        self.inputs = PlanInputs.of(bundle)
        # shortlist candidates: every prefix (codes reranked from the store shortlist as codes:
        # the funnel reranks; a prefix the store serves is a scan of S/L of the floats of a scan
        # at L), the calibration's cost model ordering them (ServedIndex.scanned_floats)
        self.indexes, self.shortlists = self.inputs.indexes, self.inputs.shortlists
        self.factories = {p.length: p.factory for p in bundle.manifest.prefixes}
        plans = recorded_plans(bundle.manifest, self.config)
        self.recorded = plans is not None
        if plans is None:
            plans = calibrate_plans(bundle, self.config, self.inputs)
        self.choices, self.direct_reasons = plans.choices, plans.direct_reasons

    def exact(self, length: int) -> ExactRows | None:
        return self.inputs.exact(length)

    def plan(
        self, query: SearchQuery, length: int, allowed: AllowedRows | None, exact_max: int
    ) -> PlanRun:
        """The plan a query runs at target prefix L (module docstring); QueryError for a
        funnel the bundle cannot run."""
        if requests_funnel(query) and self.exact(length) is None:
            raise QueryError(
                f"no funnel at prefix {length}: the bundle keeps no exact rows at prefix ≥ "
                f"{length} to rerank from ({self.factories[max(self.indexes)]} at the full "
                "prefix); ask for a direct plan"
            )
        count = None if allowed is None else allowed.count
        return plan_query(
            query,
            length,
            self.rows,
            count,
            self.choices,
            self.direct_reasons,
            self.indexes,
            self.config.default_factor,
            exact_max,
        )

    # --- running ---

    def funnel(
        self, shortlist: int, factor: int, rotated: np.ndarray, length: int, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Unfiltered funnel of rotated queries [Q, D] (shortlist prefix S, factor F):
        (scores [Q, k], rows [Q, k])."""
        exact = self.exact(length)
        assert exact is not None
        index = self.shortlists.get(shortlist, self.indexes[shortlist])
        setting = self.shortlist_search(length, shortlist)
        return funnel_search(index, shortlist, exact, rotated, length, k, factor, setting)

    def shortlist_search(self, length: int, shortlist: int) -> str:
        """The shortlist's search parameters the calibration chose for target L (a wider
        nprobe), when the funnel shortlists at its prefix; else the index's own ("")."""
        choice = self.choices.get(length)
        if choice is None or choice.shortlist_prefix != shortlist:
            return ""
        return choice.shortlist_search

    def filtered_funnel(
        self,
        run: PlanRun,
        rotated: np.ndarray,
        length: int,
        k: int,
        allowed: AllowedRows,
        exact_max: int,
        blocks: FilterBlocks | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """One filtered query [1, D]: the shortlist a filtered search at S (allowed rows
        only; `blocks` as `filtered_search` takes them), reranked exactly at L."""
        exact = self.exact(length)
        assert exact is not None
        s = run.shortlist_prefix
        query = prefix_vectors(rotated, s)
        _, candidates = filtered_search(
            self.indexes[s],
            query,
            k * run.factor,
            allowed,
            exact_max,
            self.shortlist_search(length, s),
            blocks,
        )
        return rerank(exact, rotated[0], candidates[0], length, k)


def requested_funnel(
    query: SearchQuery,
    length: int,
    prefixes: Iterable[int],
    choice: FunnelChoice | None,
    default_factor: int,
) -> tuple[int, int]:
    """The shortlist prefix and factor of a funnel a query asks for at target prefix L: what it
    names, else the funnel calibrated at L (its factor only with its own shortlist prefix),
    else the shortest prefix and `default_factor`. QueryError for a shortlist prefix that is
    not one of `prefixes` below L. Both engines' rule (the local `Planner`, the Milvus
    scorer)."""
    asked = query.plan
    below = sorted(n for n in prefixes if n < length)
    if not below:
        raise QueryError(f"no funnel at prefix {length}: the contract has no shorter prefix")
    shortlist = asked.shortlist_prefix or (choice.shortlist_prefix if choice else below[0])
    if shortlist not in below:
        raise QueryError(
            f"shortlist prefix {shortlist} is not a prefix of the bundle below the target "
            f"{length}; choose from {', '.join(map(str, below))}"
        )
    factor = asked.factor or (
        choice.factor if choice and choice.shortlist_prefix == shortlist else default_factor
    )
    return shortlist, factor


def requests_funnel(query: SearchQuery) -> bool:
    """A query that asks for a funnel: by its kind, or by naming a shortlist prefix or factor
    without asking for a direct plan."""
    asked = query.plan
    return asked.kind != PlanKind.DIRECT and bool(
        asked.kind == PlanKind.FUNNEL or asked.shortlist_prefix or asked.factor
    )


def plan_query(
    query: SearchQuery,
    length: int,
    rows: int,
    allowed: int | None,
    choices: dict[int, FunnelChoice],
    direct_reasons: dict[int, str],
    prefixes: Iterable[int],
    default_factor: int,
    exact_max: int,
    shortlist_cap: int | None = None,
) -> PlanRun:
    """The plan a query runs at target prefix L, every engine's (module docstring): direct
    when asked; a requested funnel (`requested_funnel`); else what "auto" runs (`auto_plan`).
    `allowed`: the rows a filter allows (None: no filter); `shortlist_cap`: the most rows an
    engine's shortlist search returns (None: no cap)."""
    if query.plan.kind == PlanKind.DIRECT:
        return PlanRun(PlanKind.DIRECT, "requested")
    if requests_funnel(query):
        shortlist, factor = requested_funnel(
            query, length, prefixes, choices.get(length), default_factor
        )
        available = rows if allowed is None else allowed
        available = min(query.k * factor, available)
        run = PlanRun(PlanKind.FUNNEL, "requested", shortlist, factor, available)
    else:
        run = auto_plan(choices, direct_reasons, query, length, rows, allowed, exact_max)
    if shortlist_cap is not None and run.shortlist_rows > shortlist_cap:
        run = dataclasses.replace(run, shortlist_rows=shortlist_cap)  # PlanRun is frozen
    return run


def auto_plan(
    choices: dict[int, FunnelChoice],
    direct_reasons: dict[int, str],
    query: SearchQuery,
    length: int,
    rows: int,
    allowed: int | None,
    exact_max: int,
) -> PlanRun:
    """What "auto" runs at target prefix L (module docstring), from a bundle's calibrated
    funnels (`choices`) and the reasons it searches directly elsewhere: the local engine's
    `Planner`, and the Milvus scorer from the same calibration recorded at export
    (indexer/milvus/export.py). `allowed`: the rows a filter allows (None: no filter)."""
    choice = choices.get(length)
    if choice is None:
        reason = direct_reasons.get(length, "auto: the funnel is used at caption and full")
        return PlanRun(PlanKind.DIRECT, reason)
    if allowed is not None and allowed <= exact_max:
        return PlanRun(
            PlanKind.DIRECT, f"auto: the filter allows ≤ {exact_max} rows, scored exactly"
        )
    if query.min_recall is not None and query.min_recall > choice.recall:
        return PlanRun(
            PlanKind.DIRECT,
            f"auto: min_recall {query.min_recall:g} is above the funnel's calibrated "
            f"recall@10 {choice.recall:.3f}",
        )
    reason = (
        f"auto: recall@10 {choice.recall:.3f} on {choice.queries} gallery rows, "
        f"{choice.cost_share:.0%} of a direct scan's floats"
    )
    shortlisted = min(query.k * choice.factor, rows if allowed is None else allowed)
    return PlanRun(PlanKind.FUNNEL, reason, choice.shortlist_prefix, choice.factor, shortlisted)
