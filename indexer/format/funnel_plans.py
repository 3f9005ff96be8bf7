"""Which prefixes "auto" funnels, measured once per version: at build time, recorded in its
manifest (`funnels`), so that a replica that opens the version plans at once.

The rule (`calibrate_plans`): on a bundle of at least `min_rows` rows, for each target prefix
L (the caption and full prefixes; with a shared store, every prefix it serves but the shortest,
where a direct search would scan the store), the cheapest funnel (S, F) whose recall@10 against
exact search at L on `queries` gallery rows reaches `recall` at ≤ `max_cost_share` of a direct
scan's floats (indexer/format/funnel.py: `calibrate`). The other prefixes search directly, each
with its reason.

    record = plans_record(calibrate_plans(bundle, FunnelConfig()), FunnelConfig())
    plans = recorded_plans(manifest, config)    # None: not recorded, or for another config

A version recorded under one config serves an engine configured otherwise by calibrating
again when it loads (service/engine/plans.py's `Planner`), as every version written before
the record did.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import ConfigDict, Field

from indexer.format.bundle import Bundle
from indexer.format.funnel import ExactRows, FunnelChoice, calibrate, exact_rows_for
from indexer.format.manifest import BundleManifest
from indexer.format.served_index import ServedIndex
from training.core.config import ConfigModel
from training.core.granularity import Granularity

log = logging.getLogger(__name__)

DEFAULT_TARGETS = (Granularity.CAPTION, Granularity.FULL)


class FunnelConfig(ConfigModel):
    """When "auto" funnels (module docstring): calibrated on bundles of ≥ `min_rows` rows, for
    the `targets` granularities, to recall@10 ≥ `recall` on `queries` gallery rows, trying the
    `factors`, at most `max_cost_share` of a direct scan's floats; `enabled` False makes auto
    always direct; `default_factor` is a requested funnel's F when nothing else gives one."""

    model_config = ConfigDict(frozen=True)

    enabled: bool = True
    min_rows: int = Field(20_000, ge=1)
    targets: tuple[Granularity, ...] = DEFAULT_TARGETS
    recall: float = Field(0.99, gt=0.0, le=1.0)
    factors: tuple[int, ...] = (10, 20, 50, 100)
    queries: int = Field(100, ge=1)
    max_cost_share: float = Field(0.5, gt=0.0, le=1.0)
    default_factor: int = Field(100, ge=1)


@dataclass(frozen=True)
class FunnelPlans:
    """The funnel chosen per target prefix, and why "auto" searches the others directly."""

    choices: dict[int, FunnelChoice] = field(default_factory=dict)
    direct_reasons: dict[int, str] = field(default_factory=dict)


@dataclass
class PlanInputs:
    """What a calibration reads of a loaded bundle: its prefix indexes, what each shortlists
    with, and the exact rows to rerank from per target (found once, kept)."""

    indexes: dict[int, ServedIndex]
    shortlists: dict[int, ServedIndex]
    exact_by_target: dict[int, ExactRows | None] = field(default_factory=dict)

    @classmethod
    def of(cls, bundle: Bundle) -> PlanInputs:
        indexes = {length: bundle.index(length) for length in bundle.prefix_lengths}
        return cls(indexes, {n: i.shortlist for n, i in indexes.items()})

    def exact(self, length: int) -> ExactRows | None:
        if length not in self.exact_by_target:
            self.exact_by_target[length] = exact_rows_for(self.indexes, length)
        return self.exact_by_target[length]


def calibrate_plans(
    bundle: Bundle, config: FunnelConfig, inputs: PlanInputs | None = None
) -> FunnelPlans:
    """The funnels of a loaded bundle by the rule of the module docstring (`inputs`: its
    indexes, when the caller holds them already)."""
    inputs = inputs or PlanInputs.of(bundle)
    plans = FunnelPlans()
    contract = bundle.contract
    targets = {contract[g] for g in config.targets}
    if bundle.store is not None:  # a direct search there is a scan of the store: funnel it
        shortest = min(inputs.indexes)
        targets |= {p.length for p in bundle.manifest.prefixes if p.store}
        targets.discard(shortest)
        plans.direct_reasons[shortest] = "auto: the shortest prefix, none below to shortlist"
    skipped = calibration_skipped(config, bundle.rows)
    for length in sorted(targets):
        if skipped is not None:
            plans.direct_reasons[length] = skipped
            continue
        exact = inputs.exact(length)
        if exact is None:
            plans.direct_reasons[length] = f"auto: no exact rows at prefix ≥ {length} to rerank"
            continue
        started = time.perf_counter()
        choice = calibrate(
            inputs.shortlists,
            exact,
            length,
            10,
            config.recall,
            config.factors,
            config.queries,
            config.max_cost_share,
        )
        log.info(
            "prefix %d: funnel %s (calibrated in %.1f s)",
            length,
            choice or "none",
            time.perf_counter() - started,
        )
        if choice is None:
            plans.direct_reasons[length] = no_funnel_reason(config)
        else:
            plans.choices[length] = choice
    if bundle.store is not None and bundle.store.on_disk:
        bundle.store.release()  # the calibration's scans and reranks held none of it
    return plans


def calibration_skipped(config: FunnelConfig, rows: int) -> str | None:
    """Why "auto" searches a bundle of `rows` rows directly without calibrating a funnel (the
    funnel off, or too few rows for one to pay); None when it calibrates. Both engines' rule."""
    if not config.enabled:
        return "auto: the funnel is off"
    if rows < config.min_rows:
        return f"auto: {rows} rows < {config.min_rows}, a direct scan is cheap"
    return None


def no_funnel_reason(config: FunnelConfig) -> str:
    """Why "auto" searches directly where calibration found no funnel that pays."""
    return (
        f"auto: no funnel reached recall@10 {config.recall} at ≤ "
        f"{config.max_cost_share:.0%} of a direct scan"
    )


def plans_record(plans: FunnelPlans, config: FunnelConfig, seconds: float) -> dict[str, Any]:
    """The manifest's `funnels`: the config they were calibrated under, each target's choice,
    each direct prefix's reason, and the seconds the calibration took."""
    return {
        "config": config.model_dump(mode="json"),
        "choices": {str(n): asdict(c) for n, c in sorted(plans.choices.items())},
        "direct": {str(n): reason for n, reason in sorted(plans.direct_reasons.items())},
        "seconds": round(seconds, 3),
    }


def recorded_plans(manifest: BundleManifest, config: FunnelConfig) -> FunnelPlans | None:
    """The plans a version recorded at build time, where they were calibrated under `config`;
    None otherwise (no record: a version written before it, or another config)."""
    record = manifest.funnels
    if not record or record.get("config") != config.model_dump(mode="json"):
        return None
    return FunnelPlans(
        {int(n): FunnelChoice(**c) for n, c in record["choices"].items()},
        {int(n): str(reason) for n, reason in record["direct"].items()},
    )
