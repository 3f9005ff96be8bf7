"""Calling the HTTP/JSON API of a live server with the standard library (no HTTP client
package): JSON in, status and JSON (or bytes) out."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def call(
    base: str,
    path: str,
    body: Any = None,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
    method: str | None = None,
) -> tuple[int, Any]:
    """(HTTP status, the decoded JSON answer — or the bytes where it is no JSON)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(
        base + path,
        data=data,
        headers={"content-type": "application/json", **(headers or {})},
        method=method or ("POST" if data is not None else "GET"),
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, content, kind = response.status, response.read(), response.headers
    except urllib.error.HTTPError as error:
        status, content, kind = error.code, error.read(), error.headers
    if "json" in (kind.get("content-type") or ""):
        return status, json.loads(content)
    return status, content
