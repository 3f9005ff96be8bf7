"""Throwaway server processes the tests and the benchmarks share.

`RedisServer`: a redis-server of our own on a free local port, no persistence, so it can be
killed (SIGKILL, as a crash looks) and started again empty.

    with RedisServer() as redis:
        redis.url            # redis://127.0.0.1:<port>/0
        redis.kill(); redis.start()

`start_server` / `served_process`: `strata serve` on a bundle in a subprocess, with the address
it announces.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

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


def start_server(
    bundles: Path,
    timeout: float = 300.0,
    http: bool = False,
    extra: Sequence[str] = (),
    root: Path | None = None,
) -> tuple[subprocess.Popen[str], str, str | None]:
    """`strata serve --bundles DIR --port 0` in a subprocess (with `--http-port 0` when `http`,
    then the `extra` arguments; the code of checkout `root` where given, else this one's);
    (process, gRPC host:port, HTTP host:port or None)."""
    command = [sys.executable, "-m", "service", "serve", "--bundles", str(bundles), "--port", "0"]
    env = {**os.environ, "STRATA_DEVICE": os.environ.get("STRATA_DEVICE", "cpu")}
    if root is not None:
        env["PYTHONPATH"] = str(root)
    process = subprocess.Popen(
        [*command, *(["--http-port", "0"] if http else []), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=root,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    target: str | None = None
    for line in process.stdout:
        lines.append(line)
        found = re.search(r" on (\S+:\d+);.*Ctrl-C stops", line)  # "; N workers" between
        target = found.group(1) if found else target
        found_http = re.search(r"^http: http://(\S+:\d+)/", line)
        if target is not None and (not http or found_http):
            threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
            return process, target, found_http.group(1) if found_http else None
        if time.monotonic() > deadline:
            break
    process.kill()
    raise RuntimeError("the server did not start:\n" + "".join(lines[-20:]))


@contextlib.contextmanager
def served_process(
    bundles: Path, http: bool = False
) -> Iterator[tuple[subprocess.Popen[str], str, str | None]]:
    """`start_server` for the length of the block, then terminated (killed after 30 s)."""
    process, target, http_target = start_server(bundles, http=http)
    try:
        yield process, target, http_target
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
