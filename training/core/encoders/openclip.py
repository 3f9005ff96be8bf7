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
import open_clip
import torch
from open_clip.model import CLIP
from open_clip.transformer import text_global_pool
from torch import nn

from training.core.encoders.base import Encoder, EncoderSpec
from training.core.errors import InputError
from training.core.files import sha256_file

log = logging.getLogger(__name__)


def _register_arch(arch: str) -> str:
    """Architecture name for open_clip; a JSON config path is registered under its file stem."""
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
            # drawn on the CPU in fp32 whatever the device, so a seed means the same weights
            # for the job that embedded a gallery and the GPU service that embeds its queries
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(value))
                model, _, preprocess = open_clip.create_model_and_transforms(
                    name, pretrained=None, precision="fp32", device="cpu"
                )
            model.to(device)
            if precision == "fp16":
                open_clip.convert_weights_to_lp(model, dtype=torch.float16)
        else:
            if kind == "file":
                provenance.update(path=value, sha256=sha256_file(Path(value)))
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
        tokens = self.tokenizer(texts).to(self.device)
        with torch.inference_mode():
            if has_causal_text_tower(self.model):
                return encode_text_trimmed(self.model, tokens).float().cpu().numpy()
            return self.model.encode_text(tokens).float().cpu().numpy()

    def _image_batch(self, images: list[Any]) -> np.ndarray:
        pixels = torch.stack([self.preprocess(image) for image in images]).to(self.device)
        if self.device.startswith("cuda"):
            pixels = pixels.half()
        with torch.inference_mode():
            return self.model.encode_image(pixels).float().cpu().numpy()


def has_causal_text_tower(model: Any) -> bool:
    """A CLIP text tower with a causal mask, pooled at the end-of-text token."""
    return (
        isinstance(model, CLIP)
        and getattr(model, "attn_mask", None) is not None
        and model.text_pool_type in ("argmax", "eos")
    )


def encode_text_trimmed(model: CLIP, tokens: torch.Tensor) -> torch.Tensor:
    """`model.encode_text(tokens)` without the padding after the batch's last end-of-text token.

    open_clip pads every text to the context length (77). Under a causal mask the output at
    position i depends only on tokens 0..i, and the pooled feature is read at the end-of-text
    position, so dropping the columns after the batch's longest text gives the same vectors for
    a fraction of the work (captions are ~15 tokens).
    """
    if model.text_pool_type == "argmax":
        ends = tokens.argmax(dim=-1)
    else:
        ends = (tokens == model.text_eos_id).int().argmax(dim=-1)
    length = int(ends.max()) + 1
    tokens = tokens[:, :length]
    cast_dtype = model.transformer.get_cast_dtype()
    x = model.token_embedding(tokens).to(cast_dtype)
    x = x + model.positional_embedding[:length].to(cast_dtype)
    x = model.transformer(x, attn_mask=model.attn_mask[:length, :length])
    x = model.ln_final(x)
    x = text_global_pool(x, tokens, model.text_pool_type, eos_token_id=model.text_eos_id)
    projection = model.text_projection
    if projection is None:
        return x
    return projection(x) if isinstance(projection, nn.Linear) else x @ projection
