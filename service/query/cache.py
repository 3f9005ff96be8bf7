"""The query-embedding cache: a text query embedded once is not embedded again.

    cache = QueryCache(redis_url="redis://redis:6379/0", prefix="strata")
    engine = SearchEngine(bundle, encoder, cache=cache)      # SearchEngine._embed uses it
    cache.stats()        # {"local": {"hits": .., "misses": ..}, "redis": {...}, "redis_state": ..}
    cache.close()

Key. A query is looked up by its encoder id and its normalised text — NFKC, casefolded, runs of
whitespace collapsed to one space and stripped — hashed with SHA-256 (service/query/keys.py):

    local:  "{sha256(encoder id)[:16]}:{sha256(normalised text)[:32]}"
    Redis:  "{prefix}:qemb:{the same}"

so "A  red DOG" and "a red dog" share one entry, and two encoders never do. The engine embeds
the normalised text (every supported encoder lowercases and collapses whitespace itself), so a
cached value is exactly what the encoder gives for its key, whichever spelling came first.

Tiers. Each look-up tries the in-process LRU (always; bounded to `size` entries), then Redis
(when a URL is configured; one MGET per batch) and copies Redis hits into the LRU. What the
encoder computed is stored in both (one pipelined SET … PX per batch). A value is the row as
little-endian float32 bytes; on read its length must be dim × 4 and every value finite, or it
counts as a miss (`rejected`) and is recomputed and overwritten.

Redis's size. Every key is written with a time to live (`ttl_s`, default one day) and holds
dim × 4 bytes (1,536 for MiniLM) — so what the cache holds in Redis is bounded by the distinct
queries of one TTL times that. A hard memory cap is Redis's own (`maxmemory` with the
`volatile-lru` or `allkeys-lru` policy: every key here has a TTL, so either evicts them); this
service does not set it, since the Redis may be shared.

Outages. Redis is never allowed to slow or fail a request: commands have short socket timeouts
(`timeout_s`, 0.1 s) and no retries; the first failure opens a circuit breaker — Redis is then
skipped (the LRU and the encoder serve alone) while a background thread PINGs it with back-off
(`backoff_s` doubling up to `max_backoff_s`: service/query/circuit_breaker.py); the first answer
closes the breaker and look-ups use Redis again. `redis_state` says "connected",
"disconnected" or "disabled" (no URL).

Counts: `stats()` (plain ints), and, in the metrics the cache is given (`metrics=`, the server's
`ServerMetrics`), `strata_query_cache_requests_total{tier,result}` and `strata_redis_up`.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from service.query.circuit_breaker import DEFAULT_BACKOFF_S, DEFAULT_MAX_BACKOFF_S, CircuitBreaker
from service.query.keys import cache_key, decode_value, encode_value
from training.core.errors import InputError
from training.core.redis_connection import redacted, redis_connection, redis_errors

log = logging.getLogger(__name__)

DEFAULT_SIZE = 4096  # entries of the in-process LRU (1.5 KiB each for a 384-d encoder)
DEFAULT_TTL_S = 24 * 3600.0
DEFAULT_TIMEOUT_S = 0.1
DEFAULT_PREFIX = "strata"

CONNECTED, DISCONNECTED, DISABLED = "connected", "disconnected", "disabled"


class QueryCacheError(InputError):
    """A cache that cannot be configured as asked (a bad Redis URL, a size below 1)."""


# --- the local tier and the counts ----------------------------------------------------------------


class LocalLRU:
    """A size-bounded least-recently-used map of key → float32 row (thread-safe)."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        if size < 1:
            raise QueryCacheError(f"the query cache needs at least 1 entry, got {size}")
        self.size = size
        self._rows: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, key: str) -> np.ndarray | None:
        """A copy of the row (callers may write to it), or None."""
        with self._lock:
            row = self._rows.get(key)
            if row is None:
                return None
            self._rows.move_to_end(key)
        return row.copy()

    def __contains__(self, key: object) -> bool:
        """Whether `key` is held (its place in the LRU order unchanged)."""
        with self._lock:
            return key in self._rows

    def put(self, key: str, row: np.ndarray) -> None:
        stored = np.array(row, dtype=np.float32, copy=True)
        with self._lock:
            self._rows[key] = stored
            self._rows.move_to_end(key)
            while len(self._rows) > self.size:
                self._rows.popitem(last=False)


@dataclass
class TierCounts:
    hits: int = 0
    misses: int = 0


@dataclass
class RedisCounts(TierCounts):
    skipped: int = 0  # look-ups not sent because the breaker was open
    rejected: int = 0  # stored values of the wrong size or not finite
    errors: int = 0  # failed commands (each opened the breaker)
    stored: int = 0
    reconnects: int = 0


class CacheMetrics(Protocol):
    """Where the cache's counts go (`service.serving.metrics.ServerMetrics` is one)."""

    def record_cache(self, tier: str, hit: bool, count: int = 1) -> None: ...

    def set_redis_up(self, up: bool | None) -> None: ...


# --- Redis (the I/O edge) ------------------------------------------------------------------------


class QueryCache:
    """The two tiers and the breaker (see the module docstring). Thread-safe."""

    def __init__(
        self,
        size: int = DEFAULT_SIZE,
        redis_url: str | None = None,
        prefix: str = DEFAULT_PREFIX,
        ttl_s: float = DEFAULT_TTL_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        backoff_s: float = DEFAULT_BACKOFF_S,
        max_backoff_s: float = DEFAULT_MAX_BACKOFF_S,
        metrics: CacheMetrics | None = None,
    ) -> None:
        if redis_url is not None and not prefix:
            raise QueryCacheError("the Redis key prefix must not be empty")
        if not ttl_s > 0 or not timeout_s > 0 or not backoff_s > 0:
            raise QueryCacheError("the cache's TTL, timeout and back-off must be positive")
        self.local = LocalLRU(size)
        self.metrics = metrics
        self.url, self.prefix, self.ttl_s, self.timeout_s = redis_url, prefix, ttl_s, timeout_s
        self.local_counts = TierCounts()
        self.redis_counts = RedisCounts()
        self.breaker = CircuitBreaker(backoff_s, max_backoff_s)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._probe: threading.Thread | None = None
        self._client = (
            redis_connection(redis_url, timeout_s, error=QueryCacheError, fail_fast=True)
            if redis_url
            else None
        )
        if self._client is not None:
            self._try_connect()
        self.report_state()

    # --- state ---

    @property
    def redis_state(self) -> str:
        if self._client is None:
            return DISABLED
        return CONNECTED if self.breaker.closed else DISCONNECTED

    def redis_key(self, key: str) -> str:
        return f"{self.prefix}:qemb:{key}"

    def describe(self) -> str:
        tier = f"Redis {redacted(self.url)} ({self.redis_state})" if self.url else "no Redis"
        return f"query cache: {self.local.size} local entries, {tier}"

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "local": asdict(self.local_counts),
                "redis": asdict(self.redis_counts),
                "local_entries": len(self.local),
                "redis_state": self.redis_state,
            }

    def report_state(self) -> None:
        """Set strata_redis_up to this cache's state."""
        state = self.redis_state
        up = None if state == DISABLED else state == CONNECTED
        self._feed(lambda metrics: metrics.set_redis_up(up))

    def _feed(self, record: Callable[[CacheMetrics], None]) -> None:
        """`record` into the metrics, if any; a failure is logged, never raised."""
        if self.metrics is None:
            return
        try:
            record(self.metrics)
        except Exception:  # metrics must never fail a request
            log.debug("a query-cache metrics feed failed", exc_info=True)

    def _count(self, tier: str, hits: int, misses: int) -> None:
        def record(metrics: CacheMetrics) -> None:
            metrics.record_cache(tier, True, hits)
            metrics.record_cache(tier, False, misses)

        self._feed(record)

    # --- look-up and store ---

    def lookup(self, encoder_id: str, dim: int, texts: Sequence[str]) -> list[np.ndarray | None]:
        """Each text's cached row (a copy), or None: the LRU, then Redis for what it lacks."""
        keys = [cache_key(encoder_id, t) for t in texts]
        found: list[np.ndarray | None] = [self.local.get(k) for k in keys]
        local_hits = sum(row is not None for row in found)
        with self._lock:
            self.local_counts.hits += local_hits
            self.local_counts.misses += len(keys) - local_hits
        self._count("local", local_hits, len(keys) - local_hits)
        missing = [i for i, row in enumerate(found) if row is None]
        if missing and self._client is not None:
            fetched = self._redis_get([keys[i] for i in missing], dim)
            for i, row in zip(missing, fetched, strict=True):
                if row is not None:
                    found[i] = row
                    self.local.put(keys[i], row)
        self.report_state()
        return found

    def has_local(self, encoder_id: str, text: str) -> bool:
        """Whether the local tier holds `text`'s row (no count, no Redis): a query that will not
        need the encoder."""
        return cache_key(encoder_id, text) in self.local

    def store(self, encoder_id: str, texts: Sequence[str], rows: np.ndarray) -> None:
        """Remember what the encoder computed for `texts` (rows in the same order)."""
        keys = [cache_key(encoder_id, t) for t in texts]
        for key, row in zip(keys, rows, strict=True):
            self.local.put(key, row)
        if self._client is not None:
            self._redis_set(keys, rows)

    # --- the Redis tier ---

    def _redis_get(self, keys: list[str], dim: int) -> list[np.ndarray | None]:
        if not self._usable():
            with self._lock:
                self.redis_counts.skipped += len(keys)
            return [None] * len(keys)
        assert self._client is not None
        try:
            raw = self._client.mget([self.redis_key(k) for k in keys])
        except redis_errors() as exc:
            self._failed("read", exc)
            return [None] * len(keys)
        rows = [decode_value(r, dim) for r in raw]
        hits = sum(r is not None for r in rows)
        rejected = sum(r is None and v is not None for r, v in zip(rows, raw, strict=True))
        with self._lock:
            self.redis_counts.hits += hits
            self.redis_counts.misses += len(keys) - hits
            self.redis_counts.rejected += rejected
        if rejected:
            log.warning("query cache: %d Redis value(s) of the wrong size ignored", rejected)
        self._count("redis", hits, len(keys) - hits)
        return rows

    def _redis_set(self, keys: list[str], rows: np.ndarray) -> None:
        if not self._usable():
            return
        assert self._client is not None
        ttl_ms = max(1, int(self.ttl_s * 1000))
        try:
            pipe = self._client.pipeline(transaction=False)
            for key, row in zip(keys, rows, strict=True):
                pipe.set(self.redis_key(key), encode_value(row), px=ttl_ms)
            pipe.execute()
        except redis_errors() as exc:
            self._failed("write", exc)
            return
        with self._lock:
            self.redis_counts.stored += len(keys)

    def _usable(self) -> bool:
        return self._client is not None and self.breaker.closed and not self._stop.is_set()

    def _failed(self, doing: str, exc: BaseException) -> None:
        with self._lock:
            self.redis_counts.errors += 1
            was_closed = self.breaker.closed
            self.breaker.failure()
            wait = self.breaker.backoff
        if was_closed:
            log.warning(
                "query cache: cannot %s Redis at %s (%s); serving without it, retrying in %.1f s",
                doing,
                redacted(self.url or ""),
                " ".join(str(exc).split()) or type(exc).__name__,
                wait,
            )
        self.report_state()
        self._start_probe()

    def _try_connect(self) -> bool:
        assert self._client is not None
        try:
            self._client.ping()
        except redis_errors() as exc:
            self._failed("reach", exc)
            return False
        return True

    def _start_probe(self) -> None:
        with self._lock:
            if self._stop.is_set() or (self._probe is not None and self._probe.is_alive()):
                return
            self._probe = threading.Thread(
                target=self._reconnect, name="strata-redis-probe", daemon=True
            )
            self._probe.start()

    def _reconnect(self) -> None:
        """The background probe: PING with back-off until Redis answers (or `close`)."""
        assert self._client is not None
        while not self._stop.wait(self.breaker.wait()):
            try:
                self._client.ping()
            except redis_errors():
                with self._lock:
                    self.breaker.failure()
                continue
            with self._lock:
                self.breaker.success()
                self.redis_counts.reconnects += 1
            log.warning("query cache: Redis at %s answers again", redacted(self.url or ""))
            self.report_state()
            return

    def close(self) -> None:
        """Stop the probe and close the Redis connections (the LRU stays usable)."""
        self._stop.set()
        probe = self._probe
        if probe is not None:
            probe.join(max(1.0, 4 * self.timeout_s))
        if self._client is not None:
            self._client.close()


def open_cache(
    redis_url: str | None,
    prefix: str = DEFAULT_PREFIX,
    size: int = DEFAULT_SIZE,
    metrics: CacheMetrics | None = None,
) -> QueryCache:
    """`strata serve`'s cache: local always, Redis when a URL is given (an empty one: none)."""
    return QueryCache(size=size, redis_url=redis_url or None, prefix=prefix, metrics=metrics)
