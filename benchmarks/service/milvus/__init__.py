"""The Milvus backend's benchmarks: `python -m benchmarks.service.milvus` (the backend against
local FAISS on the same bundle: parity, latency, export, word filters) and
`python -m benchmarks.service.milvus.kinds` (the index kinds for the shortlist codes); both on
Milvus Lite in this process unless --to names a server."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.servers import free_port


@contextlib.contextmanager
def milvus_target(to: str | None, data: Path) -> Iterator[str]:
    """The Milvus a benchmark part talks to: `to` (a milvus:// URI, --to) as given, else a
    Milvus Lite server in this process over `data`, stopped when the part ends."""
    if to:
        yield to
        return
    target, stop = lite_server(data)
    try:
        yield target
    finally:
        stop()


def lite_server(data: Path) -> tuple[str, Any]:
    """A Milvus Lite gRPC server in this process: (its milvus:// URI, a stop function)."""
    from milvus_lite.adapter.grpc.server import start_server_in_thread

    port = free_port()
    server, db, _ = start_server_in_thread(str(data), port=port)

    def stop() -> None:
        server.stop(grace=0)
        db.close()

    return f"milvus://127.0.0.1:{port}", stop
