"""A redis-server of our own, for the soak and the outage test: a free local port, no
persistence, so it can be killed (SIGKILL, as a crash looks) and started again empty.

    with RedisServer() as redis:
        redis.url            # redis://127.0.0.1:<port>/0
        redis.kill(); redis.start()
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time

from training.core.errors import InputError
from training.core.redis_connection import redis_connection, redis_errors


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    """A redis-server on a free local port, without persistence: start, kill, start again
    (same port, empty). `with RedisServer() as redis: redis.url`."""

    def __init__(self, port: int | None = None, executable: str = "redis-server") -> None:
        found = shutil.which(executable)
        if found is None:
            raise InputError(f"{executable} not found on PATH")
        self.executable, self.port = found, port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.mkdtemp(prefix="strata-redis-")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 10.0) -> RedisServer:
        if self.running:
            return self
        self.process = subprocess.Popen(
            [
                self.executable,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis_connection(self.url, 0.2)
        deadline = time.monotonic() + timeout
        try:
            while True:
                if self.process.poll() is not None:
                    raise InputError(f"redis-server on port {self.port} exited at start-up")
                try:
                    client.ping()
                    return self
                except redis_errors():
                    if time.monotonic() > deadline:
                        raise InputError(
                            f"redis-server on port {self.port} not answering after {timeout} s"
                        ) from None
                    time.sleep(0.05)
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no goodbye to clients (what a crash looks like)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
