"""Helpers of the serving tests: a counting encoder and one whose calls the test holds, client
threads searching without pause, and a clock moved by hand.

The tests wait for events, never for time to pass: a held encoder keeps the engine busy for as
long as the test needs, a hand-moved clock makes a deadline pass at a chosen step, and
`waiting.wait_for` polls a condition with a bound that only catches a hang."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from waiting import WAIT_S

from service.api.grpc.client import StrataClient, StrataClientError
from service.engine.compute_threads import WARM_TEXT

REDIS_URL = os.environ.get("STRATA_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

QUERIES = ("a dog", "a red car", "a man riding a horse", "two children in the snow", "a cat")


def warming(texts: list[str]) -> bool:
    """Whether an encoder call is a server's warm-up at start (compute_threads.warm_lane), not
    a query's: the counting encoders pass it through unseen."""
    return texts == [WARM_TEXT]


class CountingEncoder:
    """The real encoder, counting its text calls and the texts it embedded (a server's warm-up
    call passed through unseen)."""

    def __init__(self, encoder: Any) -> None:
        self.wrapped = encoder
        self.calls = 0
        self.texts: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    def encode_text(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if warming(texts):
            return self.wrapped.encode_text(texts)
        self.calls += 1
        self.texts.extend(texts)
        return self.wrapped.encode_text(texts)


class HeldEncoder(CountingEncoder):
    """A CountingEncoder whose text calls wait at a turnstile while it is held: each for a pass
    (`let_through`) or for `release()`. `batches`: each call's texts, recorded as the call
    arrives (before it waits), in order. `holds`: which calls the turnstile stops (all when
    None); the others pass at once."""

    def __init__(
        self,
        encoder: Any,
        held: bool = False,
        holds: Callable[[list[str]], bool] | None = None,
    ) -> None:
        super().__init__(encoder)
        self.batches: list[list[str]] = []
        self._turnstile = threading.Condition()
        self._held, self._passes = held, 0
        self._holds = holds

    def hold(self) -> None:
        with self._turnstile:
            self._held = True

    def let_through(self, calls: int = 1) -> None:
        """While held: `calls` more calls may pass (those waiting first)."""
        with self._turnstile:
            self._passes += calls
            self._turnstile.notify_all()

    def release(self) -> None:
        """Every call waiting, and every later one, passes."""
        with self._turnstile:
            self._held = False
            self._turnstile.notify_all()

    def arrived(self, calls: int = 1, timeout: float = WAIT_S) -> bool:
        """Whether `calls` calls have arrived (waited for up to `timeout` seconds)."""
        with self._turnstile:
            return self._turnstile.wait_for(lambda: len(self.batches) >= calls, timeout)

    def encode_text(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if warming(texts):
            return self.wrapped.encode_text(texts)
        with self._turnstile:
            self.batches.append(texts)
            self._turnstile.notify_all()
            if self._holds is not None and not self._holds(texts):
                return super().encode_text(texts)
            # never released (a failing test): the call goes on after WAIT_S, no thread hangs
            self._turnstile.wait_for(lambda: not self._held or self._passes > 0, WAIT_S)
            if self._held and self._passes > 0:
                self._passes -= 1
        return super().encode_text(texts)


class HandClock:
    """A clock (seconds) that moves only when the test moves it."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Searching:
    """Client threads searching back to back until the block ends: every outcome recorded
    (`versions[i]`: the bundle version of each answer thread i got, in order)."""

    def __init__(self, target: str, threads: int = 3, new_every: int = 5) -> None:
        self.target, self.new_every = target, new_every
        self.versions: list[list[int]] = [[] for _ in range(threads)]
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)
        ]

    def _run(self, index: int) -> None:
        with StrataClient(self.target, timeout=30) as client:
            i = 0
            while not self._stop.is_set():
                text = QUERIES[(index + i) % len(QUERIES)]
                if i % self.new_every == self.new_every - 1:
                    text = f"{text} number {index}-{i}"  # a new text: the encoder runs too
                try:
                    result = client.search(text, k=5)
                    if len(result.hits) != 5:
                        self.failures.append(f"{len(result.hits)} hits for {text!r}")
                    self.versions[index].append(result.bundle_version)
                except StrataClientError as exc:
                    self.failures.append(str(exc))
                i += 1

    @property
    def requests(self) -> int:
        return sum(len(v) for v in self.versions)

    def __enter__(self) -> Searching:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
