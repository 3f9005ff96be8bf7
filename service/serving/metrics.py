"""Prometheus metrics of one server, on its own registry, served as text on `/metrics`.

    metrics = ServerMetrics()                 # a fresh CollectorRegistry per server
    port = metrics.start_http("127.0.0.1", 0)  # GET http://127.0.0.1:<port>/metrics
    metrics.stop_http()

Each `StrataServer` holds one `ServerMetrics` (so several servers in one process never share a
series), and hands it to what records into it: the gRPC series come from
`service.api.grpc.rpc_metrics.MetricsInterceptor`; the encoder's from each search the server runs
(`SearchEngine.search_batch(queries, observer)`, service/query/embedding.py); the query cache
receives it as a constructor argument (`QueryCache(metrics=...)`), the hot-swap follower and
the AdminService through the server. Names (dashboards and alert rules in deploy/ are written
against exactly these):

    grpc_server_started_total{grpc_type,grpc_service,grpc_method}            counter
    grpc_server_handled_total{grpc_type,grpc_service,grpc_method,grpc_code}  counter
    grpc_server_handling_seconds{grpc_type,grpc_service,grpc_method}         histogram
    strata_search_seconds{granularity}         histogram, per query, after routing
    strata_encoder_batch_size{modality}        histogram, texts or images per encoder call
    strata_encoder_seconds{modality}           histogram, per encoder call
    strata_query_cache_requests_total{tier,result}   counter (local|redis, hit|miss)
    strata_redis_up                            gauge: 1 connected, 0 not; NaN: no Redis
    strata_bundle_version, strata_bundle_rows, strata_bundle_bytes   gauges
    strata_hot_swaps_total{result}             counter (ok|failed)
    strata_bundle_refused_total{reason}        counter: versions refused (hot swap, Reload)
                                               because they do not verify; reason = the
                                               first fault's kind
                                               (indexer.verify.faults.FAULT_KINDS)
    strata_serving                             gauge: 1 serving, 0 draining or stopped
    strata_queue_depth                         gauge: requests waiting for the micro-batcher
                                               (a BatchSearch counts once)
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import start_http_server

from indexer.verify.faults import FAULT_KINDS

CACHE_TIERS = ("local", "redis")
MODALITIES = ("text", "image")
GRANULARITY_LABELS = ("object", "attribute", "relation", "caption", "full")
_SECONDS_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class RpcSeries:
    """One RPC method's series, resolved once: `started`, `handling`, and `handled(code)`."""

    def __init__(
        self, started: Any, handling: Any, handled: Counter, labels: tuple[str, str, str]
    ) -> None:
        self.started, self.handling = started, handling
        self._handled, self._labels = handled, labels
        self._by_code: dict[str, Any] = {}

    def handled(self, code: str) -> Any:
        child = self._by_code.get(code)
        if child is None:
            child = self._by_code[code] = self._handled.labels(*self._labels, code)
        return child


class ServerMetrics:
    """Every series of one server, registered on `registry` (a new one when not given)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        rpc = ("grpc_type", "grpc_service", "grpc_method")
        self.started = Counter(
            "grpc_server_started_total", "RPCs started on the server.", rpc, registry=r
        )
        self.handled = Counter(
            "grpc_server_handled_total",
            "RPCs completed on the server, by status code.",
            (*rpc, "grpc_code"),
            registry=r,
        )
        self.handling = Histogram(
            "grpc_server_handling_seconds",
            "Time from the start of an RPC to its status, on the server.",
            rpc,
            buckets=_SECONDS_BUCKETS,
            registry=r,
        )
        self.search_seconds = Histogram(
            "strata_search_seconds",
            "Time from a query's arrival to its result (queueing, embedding, search), "
            "by the granularity it was routed to.",
            ("granularity",),
            buckets=_SECONDS_BUCKETS,
            registry=r,
        )
        self.encoder_batch = Histogram(
            "strata_encoder_batch_size",
            "Texts or images per call of the query encoder.",
            ("modality",),
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.encoder_seconds = Histogram(
            "strata_encoder_seconds",
            "Time per call of the query encoder.",
            ("modality",),
            buckets=_SECONDS_BUCKETS,
            registry=r,
        )
        self.cache_requests = Counter(
            "strata_query_cache_requests_total",
            "Query-embedding cache look-ups, by tier (local, redis) and result (hit, miss).",
            ("tier", "result"),
            registry=r,
        )
        self.redis_up = Gauge(
            "strata_redis_up",
            "1 while the query cache's Redis answers, 0 when it does not; NaN: no Redis.",
            registry=r,
        )
        self.bundle_version = Gauge(
            "strata_bundle_version", "The version number of the bundle served.", registry=r
        )
        self.bundle_rows = Gauge("strata_bundle_rows", "Rows of the bundle served.", registry=r)
        self.bundle_bytes = Gauge(
            "strata_bundle_bytes", "Bytes of the bundle served (its manifest's files).", registry=r
        )
        self.hot_swaps = Counter(
            "strata_hot_swaps_total",
            "Bundle swaps, by result (ok, failed).",
            ("result",),
            registry=r,
        )
        self.refused = Counter(
            "strata_bundle_refused_total",
            "Bundle versions refused by a hot swap or Reload because they do not verify, by "
            "the first fault's kind.",
            ("reason",),
            registry=r,
        )
        self.serving = Gauge(
            "strata_serving", "1 while the server reports SERVING, 0 otherwise.", registry=r
        )
        self.queue_depth = Gauge(
            "strata_queue_depth",
            "Requests waiting for the micro-batcher (a BatchSearch counts once).",
            registry=r,
        )
        self.threads_gathered = Gauge(
            "strata_threads_gathered",
            "1 while this worker's threads are held to its own core (its calls come one at a "
            "time), 0 otherwise; summed over a pool's workers.",
            registry=r,
        )
        self.thread_moves = Counter(
            "strata_thread_moves_total",
            "Times this worker's threads were gathered onto its core or spread over every core.",
            registry=r,
        )
        # every label set a dashboard plots exists from the start (at 0), not from its first use
        for tier in CACHE_TIERS:
            for result in ("hit", "miss"):
                self.cache_requests.labels(tier, result)
        for result in ("ok", "failed"):
            self.hot_swaps.labels(result)
        for reason in FAULT_KINDS:
            self.refused.labels(reason)
        for modality in MODALITIES:
            self.encoder_batch.labels(modality)
            self.encoder_seconds.labels(modality)
        for granularity in GRANULARITY_LABELS:
            self.search_seconds.labels(granularity)
        self.redis_up.set(math.nan)
        self.serving.set(0)
        self._rpc: dict[tuple[str, str, str], RpcSeries] = {}
        self._search: dict[str, Any] = {}  # strata_search_seconds by granularity, resolved once
        self._http: Any = None
        self._http_thread: threading.Thread | None = None

    # --- feeds ---

    def preset_methods(self, service: str, methods: Sequence[tuple[str, str]]) -> None:
        """Create the series of `service`'s (method, grpc_type) pairs at 0 (OK for handled)."""
        for method, kind in methods:
            self.started.labels(kind, service, method)
            self.handled.labels(kind, service, method, "OK")
            self.handling.labels(kind, service, method)

    def observe_search(self, granularity: str, seconds: float) -> None:
        child = self._search.get(granularity)
        if child is None:
            child = self._search[granularity] = self.search_seconds.labels(granularity)
        child.observe(seconds)

    def rpc_series(self, labels: tuple[str, str, str]) -> RpcSeries:
        """The started, handling and (by code) handled series of one method's labels, looked up
        once and kept (prometheus_client's `labels()` takes a lock and builds a key per call)."""
        series = self._rpc.get(labels)
        if series is None:
            series = RpcSeries(
                self.started.labels(*labels), self.handling.labels(*labels), self.handled, labels
            )
            self._rpc[labels] = series
        return series

    def observe_encoder(self, modality: str, size: int, seconds: float) -> None:
        self.encoder_batch.labels(modality).observe(size)
        self.encoder_seconds.labels(modality).observe(seconds)

    def record_cache(self, tier: str, hit: bool, count: int = 1) -> None:
        if tier not in CACHE_TIERS:
            raise ValueError(f"cache tier {tier!r}; expected one of {', '.join(CACHE_TIERS)}")
        self.cache_requests.labels(tier, "hit" if hit else "miss").inc(count)

    def set_redis_up(self, up: bool | None) -> None:
        """True: connected; False: configured but not answering; None: no Redis configured."""
        self.redis_up.set(math.nan if up is None else float(bool(up)))

    def record_hot_swap(self, ok: bool) -> None:
        self.hot_swaps.labels("ok" if ok else "failed").inc()

    def record_refusal(self, reason: str) -> None:
        """A version refused because it does not verify (`VersionRefusedError.reason`)."""
        self.refused.labels(reason if reason in FAULT_KINDS else "manifest").inc()

    def set_bundle(self, version: int, rows: int, size_bytes: int) -> None:
        self.bundle_version.set(version)
        self.bundle_rows.set(rows)
        self.bundle_bytes.set(size_bytes)

    def set_serving(self, serving: bool) -> None:
        self.serving.set(1 if serving else 0)

    def track_queue(self, depth: Callable[[], float]) -> None:
        """Read the queue depth from `depth()` at every scrape."""
        self.queue_depth.set_function(depth)

    # --- exposition ---

    def start_http(self, host: str, port: int) -> int:
        """Serve `/metrics` on host:port (0: any free port); the bound port."""
        if self._http is not None:
            raise RuntimeError("the metrics endpoint is already running")
        self._http, self._http_thread = start_http_server(port, addr=host, registry=self.registry)
        return int(self._http.server_address[1])

    def stop_http(self) -> None:
        if self._http is None:
            return
        self._http.shutdown()
        self._http.server_close()
        if self._http_thread is not None:
            self._http_thread.join(5)
        self._http, self._http_thread = None, None

    def close(self) -> None:
        """Stop the endpoint."""
        self.stop_http()
