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
import threading
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

Rule = Callable[[Sequence[float]], float]
SCRAPE_TIMEOUT_S = 2.0


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


class SummedMetrics:
    """`/metrics` over HTTP answering with the sum of the expositions at `ports()` (each
    127.0.0.1:port/metrics, scraped at every request; one that does not answer is left out)
    and the families `own(scraped)` adds, given how many answered.

        endpoint = SummedMetrics(lambda: [9101, 9102], lambda n: [])
        port = endpoint.start("0.0.0.0", 9100)
        endpoint.stop()
    """

    def __init__(
        self, ports: Callable[[], list[int]], own: Callable[[int], Sequence[Metric]]
    ) -> None:
        self.ports, self.own = ports, own
        self._server: ThreadingHTTPServer | None = None

    def exposition(self) -> bytes:
        texts = []
        for port in self.ports():
            url = f"http://127.0.0.1:{port}/metrics"
            try:
                with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as answer:
                    texts.append(answer.read().decode())
            except OSError:
                continue  # a worker going away; the next scrape counts its successor
        return summed_exposition(texts, extra=self.own(len(texts)))

    def start(self, host: str, port: int) -> int:
        """Listen on host:port (0: any free port); the bound port. OSError: cannot listen."""
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = endpoint.exposition()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # scrapes are not news

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return int(self._server.server_address[1])

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
