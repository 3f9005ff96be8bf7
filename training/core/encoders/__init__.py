"""Encoders: one interface (`base.Encoder`), one factory (`load_encoder`), one module per family.

`shared_encoder` is the factory's process-wide memo: the stages of one job (the demo's embed,
GraSP-VL's views and queries, CEDAR's word embeddings) load a model once between them.

The factory sits here, above the families, so that `minilm` and `openclip` import only `base`.
"""

from __future__ import annotations

import functools

from training.core.encoders.base import (
    ENCODER_FAMILIES,
    Encoder,
    EncoderSpec,
    resolve_device,
)

__all__ = [
    "ENCODER_FAMILIES",
    "Encoder",
    "EncoderSpec",
    "load_encoder",
    "resolve_device",
    "shared_encoder",
]


def load_encoder(spec: str | EncoderSpec, device: str = "auto", batch_size: int = 128) -> Encoder:
    """The one entry point: an encoder spec string in, a ready encoder out."""
    parsed = spec if isinstance(spec, EncoderSpec) else EncoderSpec.parse(spec)
    device = resolve_device(device)
    if parsed.family == "minilm":
        from training.core.encoders.minilm import MiniLMEncoder

        return MiniLMEncoder.load(parsed, device=device, batch_size=batch_size)
    from training.core.encoders.openclip import OpenClipEncoder

    return OpenClipEncoder.load(parsed, device=device, batch_size=batch_size)


@functools.cache
def shared_encoder(spec: str, device: str = "auto", batch_size: int = 128) -> Encoder:
    """`load_encoder`, once per process for each (spec, device, batch size): for the jobs that
    embed with the same model at several stages. Encoders hold no state between calls."""
    return load_encoder(spec, device=device, batch_size=batch_size)
