"""Blocking work the process must not wait for at exit: run on a daemon thread of its own and
awaited on the event loop.

`asyncio.to_thread` runs on the loop's default executor, whose threads `asyncio.run` joins when
it ends (`shutdown_default_executor`, with no time limit on Python 3.11): a bundle version
being loaded and verified when SIGTERM arrived (seconds for a large bundle: every file is read
and hashed) held the server's exit past `--grace` until it was done. Work started with
`on_daemon_thread` is awaited the same way, but a caller that is cancelled stops waiting at
once, and the thread, a daemon, is abandoned with its result when the process exits. For work
whose result nobody needs once the server stops: the hot swap's and Reload's loads.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

from service.engine.compute_threads import same_threads

T = TypeVar("T")


async def on_daemon_thread(call: Callable[[], T], name: str = "strata-daemon-work") -> T:
    """`call()` on a new daemon thread; its result, or its exception, raised here."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():  # the caller gave up
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    threads = same_threads()  # a load calibrates plans: with this thread's count

    def run() -> None:
        threads()
        try:
            result, error = call(), None
        except BaseException as exc:  # handed to the caller, whatever it is
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await future
