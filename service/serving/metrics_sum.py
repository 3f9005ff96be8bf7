"""One `/metrics` for a server of several worker processes: each worker's exposition, added up.

    text = summed_exposition([worker_0_text, worker_1_text], extra=[workers_gauge])

Every worker keeps its own `ServerMetrics` (service/serving/metrics.py) on a private port; the
parent of `strata serve --workers N` (service/cli/pool/parent.py) scrapes them all at each
scrape of its own `/metrics` and answers with their sum, so that dashboards and alert rules
written against one process read N processes unchanged:

- counters and histograms (buckets, `_sum`, `_count`): summed per label set;
- gauges by what they mean (`GAUGE_RULES`): the queue depth is summed; `strata_serving` and
  `strata_redis_up` are the least of the workers' (1 only when every worker serves, or reaches
  Redis); the bundle gauges are the least too: `strata_bundle_version` is the oldest version any
  worker still serves, so it shows a new version once the last worker has swapped;
- `_created` samples (a per-process timestamp, meaningless summed) are dropped.

NaN (a gauge with nothing to say, like `strata_redis_up` with no Redis) is ignored beside
numbers, and stays NaN when every worker says NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

Rule = Callable[[Sequence[float]], float]


def _least(values: Sequence[float]) -> float:
    numbers = [v for v in values if not math.isnan(v)]
    return min(numbers) if numbers else math.nan


def _total(values: Sequence[float]) -> float:
    numbers = [v for v in values if not math.isnan(v)]
    return math.fsum(numbers) if numbers else math.nan


GAUGE_RULES: dict[str, Rule] = {
    "strata_serving": _least,
    "strata_redis_up": _least,
    "strata_bundle_version": _least,
    "strata_bundle_rows": _least,
    "strata_bundle_bytes": _least,
    "strata_queue_depth": _total,
}


def summed_families(texts: Iterable[str]) -> list[Metric]:
    """The families of several expositions (Prometheus text format), added up (module
    docstring); families and samples in the order they first appear."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], list[float]]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type)
                values[family.name] = {}
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                key = (sample.name, tuple(sorted(sample.labels.items())))
                values[family.name].setdefault(key, []).append(float(sample.value))
    summed = []
    for name, family in families.items():
        rule = GAUGE_RULES.get(name, _total) if family.type == "gauge" else _total
        for (sample_name, labels), numbers in values[name].items():
            family.add_sample(sample_name, dict(labels), rule(numbers))
        summed.append(family)
    return summed


class _Families:
    """A collector that yields families it was given (for `generate_latest`)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return iter(self.families)


def summed_exposition(texts: Iterable[str], extra: Sequence[Metric] = ()) -> bytes:
    """The text exposition of `texts` added up, with `extra` families (the parent's own)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families([*summed_families(texts), *extra]))  # type: ignore[arg-type]
    return generate_latest(registry)
