"""The query encoder's calls, timed and counted in the metrics of the server that made them.

    strata_encoder_batch_size{modality}   texts or images per encoder call
    strata_encoder_seconds{modality}      time per encoder call

A `SearchEngine` holds its encoder as a `TimedEncoder` from the start (one engine may serve
several servers, and a hot swap hands the same encoder to the next engine). Each server's
engine thread receives that server's metrics through its executor's initializer
(`bind_thread`), so a call counts in the registry of the server whose thread made it, and a
call from any other thread counts nowhere.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np


class EncoderObserver(Protocol):
    def observe_encoder(self, modality: str, size: int, seconds: float) -> None: ...


_engine_thread = threading.local()


def bind_thread(metrics: EncoderObserver) -> None:
    """Make encoder calls on this thread count in `metrics` (an executor's initializer)."""
    _engine_thread.metrics = metrics


class TimedEncoder:
    """An encoder proxy timing `encode_text` / `encode_image` calls and counting their sizes
    in the calling thread's metrics; every other attribute is the wrapped encoder's."""

    def __init__(self, encoder: Any) -> None:
        self.wrapped = encoder

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    def _timed(self, modality: str, call: Callable[[Any], np.ndarray], items: Any) -> np.ndarray:
        metrics: EncoderObserver | None = getattr(_engine_thread, "metrics", None)
        if metrics is None:
            return call(items)
        items = list(items)
        started = time.perf_counter()
        rows = call(items)
        metrics.observe_encoder(modality, len(items), time.perf_counter() - started)
        return rows

    def encode_text(self, texts: Sequence[str]) -> np.ndarray:
        return self._timed("text", self.wrapped.encode_text, texts)

    def encode_image(self, images: Sequence[Any]) -> np.ndarray:
        return self._timed("image", self.wrapped.encode_image, images)


def timed(encoder: Any) -> Any:
    """`encoder` wrapped in a TimedEncoder (once: a wrapped one, or None, is returned as is)."""
    if encoder is None or isinstance(encoder, TimedEncoder):
        return encoder
    return TimedEncoder(encoder)
