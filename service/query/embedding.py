"""Query embeddings: one encoder call per modality and batch, through the query cache for
texts, each call timed into the metrics of whoever asked (the server passes its own).

    rows = embed_texts(encoder, cache, texts, observer)   # cache hits, one call for the misses
    rows = encode(encoder, "image", images, observer)     # a timed encoder call

`observer` receives `observe_encoder(modality, items, seconds)` per encoder call
(strata_encoder_batch_size, strata_encoder_seconds); None: the call is not timed. A server
hands its `ServerMetrics` to each search it runs, so one engine serving several servers counts
in each server's registry, and a search run directly on an engine counts nowhere.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from service.query.cache import QueryCache
from service.query.keys import normalise_query
from training.core.encoders import Encoder

log = logging.getLogger(__name__)


class EncoderObserver(Protocol):
    def observe_encoder(self, modality: str, size: int, seconds: float) -> None: ...


def encode(
    encoder: Encoder, modality: str, items: Sequence[Any], observer: EncoderObserver | None
) -> np.ndarray:
    """`encoder.encode_text(items)` or `encode_image(items)`, timed into `observer`."""
    call = encoder.encode_text if modality == "text" else encoder.encode_image
    if observer is None:
        return call(items)
    items = list(items)
    started = time.perf_counter()
    rows = call(items)
    observer.observe_encoder(modality, len(items), time.perf_counter() - started)
    return rows


def embed_texts(
    encoder: Encoder,
    cache: QueryCache | None,
    texts: Sequence[str],
    observer: EncoderObserver | None,
) -> list[np.ndarray]:
    """Each text's embedding, in order. With a cache: each looked up first (by its normalised
    text), the distinct misses embedded in one encoder call and stored; without: all embedded
    in one call."""
    if cache is None:
        return list(encode(encoder, "text", texts, observer))
    found = cache.lookup(encoder.id, encoder.dim, texts)
    missing: dict[str, list[int]] = {}  # normalised text -> the positions that need it
    for i, (text, row) in enumerate(zip(texts, found, strict=True)):
        if row is None:
            missing.setdefault(normalise_query(text), []).append(i)
    if missing:
        unique = list(missing)
        rows = encode(encoder, "text", unique, observer)
        cache.store(encoder.id, [texts[missing[t][0]] for t in unique], rows)
        for text, row in zip(unique, rows, strict=True):
            for i in missing[text]:
                found[i] = row
    return found  # type: ignore[return-value]


def bundle_encoder(
    spec: str | None, device: str, batch_size: int
) -> tuple[Encoder | None, str | None]:
    """The encoder a bundle's manifest names, loaded on `device`; or (None, why) when this
    machine cannot load it (a name no family knows, such as an imported cache's or 'synthetic',
    a checkpoint file not here, a pretrained tag without the network): such a bundle serves
    vector queries only, and a text or image query is told `why`. A device this machine lacks
    is still an error."""
    from training.core.encoders import load_encoder, resolve_device
    from training.core.errors import InputError

    resolve_device(device)
    if not spec:
        return None, "the bundle records no encoder"
    try:
        return load_encoder(spec, device=device, batch_size=batch_size), None
    except InputError as exc:
        why = f"its encoder {spec!r} cannot be loaded on this machine ({exc})"
        log.warning("vector queries only: %s", why)
        return None, why
