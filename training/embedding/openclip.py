"""open_clip text and image towers, with open_clip's own tokenizer and preprocessing.

Weights come from the spec (see `encoders.py`): seeded random weights when none are given (for
exercising the towers; the log says so loudly and the cache manifest records it), a local
checkpoint file, or an open_clip pretrained tag (downloaded by open_clip where the network allows).
On CUDA the model runs in fp16; outputs are always float32 and L2-normalised.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from pickle import UnpicklingError
from typing import Any

import numpy as np

from training.embedding.encoders import Encoder, EncoderSpec, file_sha256
from training.errors import InputError

log = logging.getLogger(__name__)


def _register_arch(arch: str) -> str:
    """Architecture name for open_clip; a JSON config path is registered under its file stem."""
    import open_clip

    if arch.endswith(".json"):
        open_clip.add_model_config(arch)
        return Path(arch).stem
    if arch not in open_clip.list_models():
        raise InputError(
            f"unknown open_clip architecture {arch!r}; see open_clip.list_models() "
            "or give a model config as a .json path"
        )
    return arch


@dataclass
class OpenClipEncoder(Encoder):
    model: Any = None
    tokenizer: Any = None
    preprocess: Any = None

    @classmethod
    def load(cls, spec: EncoderSpec, device: str, batch_size: int) -> OpenClipEncoder:
        import open_clip
        import torch

        name = _register_arch(spec.arch)
        kind, _, value = spec.weights.partition(":")
        precision = "fp16" if device.startswith("cuda") else "fp32"
        provenance: dict[str, Any] = {"kind": kind, "arch": name, "precision": precision}
        if kind == "random":
            provenance["seed"] = int(value)
            log.warning(
                "RANDOM WEIGHTS: open_clip %s is initialised from seed %s, not trained; "
                "its embeddings carry no meaning beyond exercising the towers",
                name,
                value,
            )
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(value))
                model, _, preprocess = open_clip.create_model_and_transforms(
                    name, pretrained=None, precision=precision, device=device
                )
        else:
            if kind == "file":
                provenance.update(path=value, sha256=file_sha256(Path(value)))
            else:
                tags = open_clip.list_pretrained_tags_by_model(name)
                if value not in tags:
                    known = ", ".join(tags)
                    raise InputError(
                        f"open_clip {name} has no pretrained tag {value!r}; known: {known}"
                    )
                provenance["tag"] = value
            try:
                model, _, preprocess = open_clip.create_model_and_transforms(
                    name, pretrained=value, precision=precision, device=device
                )
            except (OSError, RuntimeError, KeyError, ValueError, EOFError, UnpicklingError) as exc:
                raise InputError(
                    f"cannot load weights {value!r} for open_clip {name}: {exc}"
                ) from exc
        model.eval()
        tokenizer = open_clip.get_tokenizer(name)
        encoder = cls(spec, 0, device, batch_size, provenance, model, tokenizer, preprocess)
        encoder.dim = encoder._text_batch(["probe"]).shape[1]
        return encoder

    @property
    def has_image_tower(self) -> bool:
        return getattr(self.model, "visual", None) is not None

    def _text_batch(self, texts: list[str]) -> np.ndarray:
        import torch

        tokens = self.tokenizer(texts).to(self.device)
        with torch.inference_mode():
            return self.model.encode_text(tokens).float().cpu().numpy()

    def _image_batch(self, images: list[Any]) -> np.ndarray:
        import torch

        pixels = torch.stack([self.preprocess(image) for image in images]).to(self.device)
        if self.device.startswith("cuda"):
            pixels = pixels.half()
        with torch.inference_mode():
            return self.model.encode_image(pixels).float().cpu().numpy()
