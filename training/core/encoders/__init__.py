"""Encoders: one interface (`base.Encoder`), one factory (`load_encoder`), one module per family.

The factory sits here, above the families, so that `minilm` and `openclip` import only `base`.
"""

from __future__ import annotations

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
