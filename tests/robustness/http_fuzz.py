"""A seeded fuzz of the HTTP/JSON API: bad JSON, wrong types, huge bodies, path traversal in
thumbnail and static URLs. Counts sent / 2xx / 4xx / 5xx (5xx must be 0), checks that nothing
outside the image root or the static folder leaked, and that the server still answers the
good query as before and says SERVING.

The gRPC fuzz's generators (tests/robustness/fuzz_requests.py) make the body mutations:
each drawn request that parses as its message is sent in the proto's JSON mapping (its wrong values
then arrive as JSON), and those that do not (raw, truncated, bit-flipped bytes) as the body itself.
Beside them, HTTP's own kinds (HTTP_KINDS): malformed JSON, values of the wrong JSON type, unknown
fields, bodies over the limit (declared or sent), paths that climb out of the thumbnail and static
routes (`..`, encoded, double-encoded, NUL, backslashes, absolute, very long), verbs a route does
not take, and bad headers.

tests/service/api/test_http_api.py runs `run_http_fuzz(target, requests, seed, max_seconds)`
against a real server.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
import urllib.parse
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from service._generated.strata.v1 import search_pb2 as pb
from service.limits import MAX_REQUEST_BYTES
from tests.robustness.fuzz_requests import WORDS, Target, draw_requests

ROUTES = {
    "Search": "/v1/search",
    "BatchSearch": "/v1/batch-search",
    "Explain": "/v1/explain",
    "ListConcepts": "/v1/concepts",
    "GetConcept": "/v1/concepts:get",
}
MESSAGES = {
    "Search": pb.SearchRequest,
    "BatchSearch": pb.BatchSearchRequest,
    "Explain": pb.ExplainRequest,
    "ListConcepts": pb.ListConceptsRequest,
    "GetConcept": pb.GetConceptRequest,
}
HTTP_KINDS = (
    "bad_json",
    "wrong_types",
    "unknown_field",
    "huge_declared",
    "huge_sent",
    "traversal",
    "wrong_verb",
    "bad_headers",
)
GOOD = {"query": {"text": "a dog"}, "topK": 10}
LEAK_MARKERS = (b"root:x:0:0", b"[build-system]", b"STRATA-FUZZ-SECRET")
CALL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class HttpRequest:
    kind: str
    method: str
    path: str
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = (("content-type", "application/json"),)


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


_TRAVERSALS = (
    "../",
    "..%2f",
    "%2e%2e/",
    "%2e%2e%2f",
    "%252e%252e%252f",
    "..\\",
    "..%5c",
    "%2e%2e%5c",
    "....//",
    "..;/",
    "%c0%ae%c0%ae/",
    "..%00/",
)
_TARGETS = ("etc/passwd", "pyproject.toml", "secret.txt", "service/api/server.py", "")


def _traversal(rng: random.Random, t: Target) -> HttpRequest:
    base = rng.choice(("/thumbnails/", "/static/", "/thumbnails/0/", "/static/../static/", "/"))
    climb = rng.choice(_TRAVERSALS) * rng.randint(1, 12)
    shape = rng.randrange(5)
    if shape == 0:
        path = base + climb + rng.choice(_TARGETS)
    elif shape == 1:
        path = base + "%2F" + rng.choice(("etc/passwd", "tmp", "proc/self/environ"))
    elif shape == 2:
        path = (
            "/thumbnails/"
            + rng.choice(
                (str(rng.randint(-5, t.rows + 5)), str(2**70), "1e3", "0x10", " 1", "1%00", "１")
            )
            + rng.choice(("", "?version=" + str(rng.randint(-1, 3)), "?version=../../x"))
        )
    elif shape == 3:
        path = base + "a" * rng.choice((300, 5000, 60_000))
    else:
        path = base + "".join(rng.choice("%./\\\x7f~é") for _ in range(rng.randint(1, 40)))
    return HttpRequest("traversal", "GET", _escaped(path), headers=())


def _escaped(path: str) -> str:
    """`path` with what cannot go on a request line as it is (controls, space, non-ASCII)
    percent-encoded, as a client must send it; everything else (`..`, `%2e`, `\\`) kept."""
    return "".join(c if 0x20 < ord(c) < 0x7F else urllib.parse.quote(c, safe="") for c in path)


def _wrong_type(rng: random.Random) -> object:
    return rng.choice(
        ("x", 1, -1, 1.5, True, None, [], {}, [1, "a"], {"a": 1}, 2**80, "NaN", "Infinity", "")
    )


def _http_kind(kind: str, rng: random.Random, t: Target) -> HttpRequest:
    method = rng.choice(tuple(ROUTES))
    path = ROUTES[method]
    if kind == "bad_json":
        text = json.dumps(GOOD)
        body = rng.choice(
            (
                text[: rng.randint(0, len(text) - 1)],
                "{" * rng.randint(1, 200_000),
                "[" * 5000 + "]" * 5000,
                '{"query": {"text": "a dog"}, "query": {"text": "a cat"}}',
                "{'query': 1}",
                "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(1, 200))),
                "null",
                "[]",
                '"x"',
                "1e999999",
                "NaN",
            )
        ).encode("utf-8", "surrogatepass")
        return HttpRequest(kind, "POST", "/v1/search", body)
    if kind == "wrong_types":
        good: dict[str, Any] = {
            "query": {"text": rng.choice(WORDS)},
            "granularity": "GRANULARITY_OBJECT",
            "topK": 5,
            "filter": {"require": [{"name": "dog"}], "scope": "CONCEPT_SCOPE_ANY"},
            "explain": False,
            "metadataFields": ["caption"],
            "plan": {"kind": "PLAN_KIND_AUTO"},
            "minRecall": 0.9,
            "where": [],
            "groupBy": "",
            "groupSize": 1,
        }
        for _ in range(rng.randint(1, 3)):
            key = rng.choice(tuple(good))
            if rng.random() < 0.3 and isinstance(good[key], dict) and good[key]:
                inner = rng.choice(tuple(good[key]))
                good[key] = {**good[key], inner: _wrong_type(rng)}
            else:
                good[key] = _wrong_type(rng)
        return HttpRequest(kind, "POST", "/v1/search", _json(good))
    if kind == "unknown_field":
        body = {**GOOD, rng.choice(("colour", "top-k", "Query", "__proto__", "admin")): 1}
        return HttpRequest(kind, "POST", path, _json(body))
    if kind == "huge_declared":
        headers = (
            ("content-type", "application/json"),
            ("content-length", str(rng.choice((9 * 2**20, 2**40, 10**30)))),
        )
        return HttpRequest(kind, "POST", path, b"{", headers)
    if kind == "huge_sent":
        size = MAX_REQUEST_BYTES + rng.randint(1, 2**20)  # read whole, then refused (413)
        return HttpRequest(kind, "POST", "/v1/search", _json({"query": {"text": "a" * size}}))
    if kind == "wrong_verb":
        verb = rng.choice(("PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "GET"))
        return HttpRequest(kind, verb, rng.choice(("/v1/search", "/v1/explain", "/healthz")))
    if kind == "bad_headers":
        headers = rng.choice(
            (
                (("content-type", "text/plain"),),
                (
                    ("content-type", "application/json"),
                    ("strata-timeout", rng.choice(("-1", "x", "1e99", "nan", "0"))),
                ),
                (("content-type", "application/json"), ("content-encoding", "gzip")),
            )
        )
        return HttpRequest(kind, "POST", "/v1/search", _json(GOOD), headers)
    if kind == "traversal":
        return _traversal(rng, t)
    raise ValueError(f"unknown kind {kind!r}")


def from_grpc_kind(rng: random.Random, t: Target, count: int, seed: int) -> list[HttpRequest]:
    """The gRPC fuzz's requests, as JSON where they parse, as raw bodies where they do not."""
    out = []
    for request in draw_requests(count, seed, t):
        try:
            message = MESSAGES[request.method].FromString(request.payload)
            body = json_format.MessageToJson(message).encode()
        except (DecodeError, ValueError, UnicodeDecodeError):
            body = request.payload
        out.append(HttpRequest(f"grpc:{request.kind}", "POST", ROUTES[request.method], body))
    return out


def draw_http_requests(count: int, seed: int, t: Target) -> list[HttpRequest]:
    """Half the gRPC fuzz's kinds (as JSON), half HTTP's own, shuffled with `seed`."""
    rng = random.Random(seed)
    own = [_http_kind(HTTP_KINDS[i % len(HTTP_KINDS)], rng, t) for i in range(count - count // 2)]
    drawn = from_grpc_kind(rng, t, count // 2, seed) + own
    rng.shuffle(drawn)
    return drawn


# --- running --------------------------------------------------------------------------------------


class Connection:
    """One keep-alive HTTP connection, reopened after the server closes it."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.host, self.port = host, int(port)
        self._conn: http.client.HTTPConnection | None = None

    def send(self, request: HttpRequest) -> tuple[int, bytes]:
        """(status, body); status 0 when the connection failed before an answer."""
        for attempt in range(2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(
                    self.host, self.port, timeout=CALL_TIMEOUT_S
                )
            try:
                self._conn.putrequest(request.method, request.path, skip_accept_encoding=True)
                names = {name for name, _ in request.headers}
                for name, value in request.headers:
                    self._conn.putheader(name, value)
                if "content-length" not in names:
                    self._conn.putheader("content-length", str(len(request.body)))
                self._conn.endheaders(request.body or None)
                response = self._conn.getresponse()
                body = response.read()
                if response.will_close:
                    self.close()
                return response.status, body
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 1:
                    return 0, b""
        return 0, b""

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def http_target_info(target: str) -> tuple[Target, list[str], str]:
    """What the generators need, the good query's hits and the health before the fuzz."""
    conn = Connection(target)
    _, info_body = conn.send(HttpRequest("info", "GET", "/v1/index-info", headers=()))
    info = json.loads(info_body)
    t = Target(info["dim"], info["concepts"], tuple(info["metadataFields"]), int(info["rows"]))
    _, hits = conn.send(HttpRequest("good", "POST", "/v1/search", _json(GOOD)))
    health = conn.send(HttpRequest("health", "GET", "/healthz", headers=()))
    conn.close()
    ids = [h["id"] for h in json.loads(hits)["hits"]]
    return t, ids, json.loads(health[1]).get("status", f"HTTP {health[0]}")


def run_http_fuzz(
    target: str,
    requests: int = 5000,
    seed: int = 0,
    max_seconds: float = 120.0,
    concurrency: int = 8,
) -> dict[str, Any]:
    """Fuzz the HTTP API at `target` (host:port); a JSON-ready report (module docstring)."""
    t, before, _ = http_target_info(target)
    drawn = draw_http_requests(requests, seed, t)
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    leaks: list[str] = []
    lock = threading.Lock()
    cursor = iter(range(len(drawn)))
    started = time.perf_counter()
    stop_at = started + max_seconds

    def worker() -> int:
        conn, sent = Connection(target), 0
        while time.perf_counter() < stop_at:
            with lock:
                index = next(cursor, None)
            if index is None:
                break
            request = drawn[index]
            status, body = conn.send(request)
            sent += 1
            klass = "no answer" if status == 0 else f"{status // 100}xx"
            with lock:
                counts[request.kind][klass] += 1
                if status == 200 and any(m in body for m in LEAK_MARKERS):
                    leaks.append(request.path[:120])
        conn.close()
        return sent

    with ThreadPoolExecutor(concurrency) as pool:
        sent = sum(pool.map(lambda _: worker(), range(concurrency)))
    seconds = time.perf_counter() - started
    _, after, health = http_target_info(target)
    totals: Counter[str] = Counter()
    for per_kind in counts.values():
        totals.update(per_kind)
    bad = {k: dict(c) for k, c in counts.items() if c.get("5xx") or c.get("no answer")}
    same = after == before
    return {
        "benchmark": "http_fuzz",
        "target": target,
        "seed": seed,
        "requested": requests,
        "sent": sent,
        "seconds": round(seconds, 2),
        "requests_per_second": round(sent / seconds, 1) if seconds else None,
        "concurrency": concurrency,
        "classes": dict(sorted(totals.items())),
        "4xx": totals.get("4xx", 0),
        "5xx": totals.get("5xx", 0),
        "kinds": {kind: dict(sorted(c.items())) for kind, c in sorted(counts.items())},
        "failing_kinds": bad,
        "leaks": leaks,
        "after": {"health": health, "good_query_same_hits": same},
        "ok": not bad and not leaks and same and health == "SERVING",
    }
