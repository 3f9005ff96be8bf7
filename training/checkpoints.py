"""Training checkpoints: written atomically after every epoch, resumed only when they match.

A checkpoint records the fingerprints of the config and the data it was made with; a rerun
with anything else starts afresh (and says so) rather than continuing someone else's run.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import torch

from training.core.files import atomic_write_bytes

log = logging.getLogger(__name__)


def save_checkpoint(path: Path, config: str, data: str, payload: dict[str, Any]) -> None:
    """torch.save of `payload` plus the two fingerprints, replacing `path` atomically."""
    buffer = io.BytesIO()
    torch.save({"config": config, "data": data, **payload}, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: Path, config: str, data: str, device: str) -> dict[str, Any] | None:
    """The payload at `path` when it was made with this config and data, else None."""
    if not path.is_file():
        return None
    saved = torch.load(path, map_location=device, weights_only=True)
    if saved.get("config") != config or saved.get("data") != data:
        log.warning("ignoring %s: made with another config or data", path)
        return None
    return saved
