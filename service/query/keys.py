"""What the query cache stores, and under which key: pure functions of the query and the row.

    key:    "{sha256(encoder id)[:16]}:{sha256(normalise_query(text))[:32]}"
    value:  the row as little-endian float32 bytes (dim × 4 of them)

A text is normalised (NFKC, casefolded, runs of whitespace collapsed to one space, stripped),
so "A  red DOG" and "a red dog" share a key, and two encoders never do. A stored value is read
back only when it holds exactly `dim` finite float32 values.
"""

from __future__ import annotations

import hashlib
import unicodedata

import numpy as np

ENCODER_HASH = 16
TEXT_HASH = 32


def normalise_query(text: str) -> str:
    """The text a query is cached (and embedded) as: NFKC, casefolded, whitespace collapsed.
    Idempotent: normalising a normalised text gives it back."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return " ".join(folded.split())


def cache_key(encoder_id: str, text: str) -> str:
    """The local key of a query (its Redis key is "{prefix}:qemb:" + this)."""
    encoder = hashlib.sha256(encoder_id.encode()).hexdigest()[:ENCODER_HASH]
    digest = hashlib.sha256(normalise_query(text).encode()).hexdigest()[:TEXT_HASH]
    return f"{encoder}:{digest}"


def encode_value(row: np.ndarray) -> bytes:
    return np.ascontiguousarray(row, dtype="<f4").tobytes()


def decode_value(raw: bytes | None, dim: int) -> np.ndarray | None:
    """The row a stored value holds, or None when it is not `dim` finite float32 values."""
    if raw is None or len(raw) != dim * 4:
        return None
    row = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    return row if np.isfinite(row).all() else None
