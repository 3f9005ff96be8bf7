"""The HTTP API's listener: uvicorn serving an ASGI app on the gRPC server's own event loop.

    endpoint = HttpEndpoint(app, "127.0.0.1", 8080)
    port = await endpoint.start()        # bound (port 0: any free one) and accepting
    await endpoint.stop(grace_s)         # stop accepting; running requests get grace_s

One loop for both transports, so an HTTP call reaches the servicer, the micro-batcher and the
engine thread exactly as a gRPC call does. The socket is bound here (a busy port is an error
at start, and port 0 is read back at once); uvicorn's signal capture is switched off, since
the server's own handlers (service/api/server.py `serve`) stop both transports together.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn

from service.errors import ServiceError


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its signal handlers (the embedding server owns SIGINT and SIGTERM)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _no_delay(protocol: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """`protocol` with TCP_NODELAY set on each connection: uvicorn writes an answer's head and
    body in two writes, and with Nagle's algorithm on the second waits for the client's
    delayed ACK (40 ms a call on Linux, measured here before this)."""

    class NoDelay(protocol):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            super().connection_made(transport)  # type: ignore[arg-type]

    return NoDelay


class HttpEndpoint:
    """One uvicorn server on the running loop, around `app`."""

    def __init__(
        self,
        app: Any,
        host: str,
        port: int,
        max_connections: int = 256,
        grace_s: float = 5.0,
        reuse_port: bool = False,
    ) -> None:
        self.app, self.host, self.port = app, host, port
        self.reuse_port = reuse_port  # a pool's workers share the port (SO_REUSEPORT)
        self.max_connections, self.grace_s = max_connections, grace_s
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None
        self._socket: socket.socket | None = None

    async def start(self) -> int:
        """Bind, start accepting, and return the bound port."""
        try:
            sock = socket.create_server((self.host, self.port), reuse_port=self.reuse_port)
        except OSError as exc:
            raise ServiceError(f"cannot serve HTTP on {self.host}:{self.port}: {exc}") from None
        config = uvicorn.Config(
            self.app,
            log_config=None,  # the process's logging is left as it is
            log_level="warning",
            access_log=False,
            lifespan="off",
            limit_concurrency=self.max_connections,  # beyond: 503 at once
            timeout_graceful_shutdown=max(1, round(self.grace_s)),
        )
        config.load()
        config.http_protocol_class = _no_delay(config.http_protocol_class)
        self._server = _EmbeddedServer(config)
        self._socket = sock
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                sock.close()
                error = self._task.exception()
                raise ServiceError(f"the HTTP server did not start: {error}")
            await asyncio.sleep(0.005)
        self.port = int(sock.getsockname()[1])
        return self.port

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop accepting; requests running get `grace_s` seconds, then are cancelled."""
        if self._server is None or self._task is None:
            return
        grace = self.grace_s if grace_s is None else grace_s
        self._server.config.timeout_graceful_shutdown = max(0.1, grace)  # type: ignore[assignment]
        self._server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), grace + 1.0)
        except TimeoutError:
            self._server.force_exit = True
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._server, self._task = None, None
