"""Queries embedded by a newer model, answered from a bundle built with an older one.

`TranslatedEncoder` wraps model B's encoder and a query translator B → A (`strata upgrade`,
`training.cosae.upgrade`): it embeds with B and returns unit vectors in A's space, so the engine
searches A's bundle as if A had embedded the query. Its id names B, A and the translator's
fingerprint, so the query cache never mixes translated embeddings with anything else.
Vector queries are unaffected: they are taken to be in the bundle's (A's) space already.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from service.errors import ServiceError
from training.core.encoders import Encoder, load_encoder
from training.cosae.upgrade import QueryTranslator


@dataclass
class TranslatedEncoder(Encoder):
    source: Encoder | None = None
    translator: QueryTranslator | None = None

    @classmethod
    def wrap(cls, source: Encoder, translator: QueryTranslator) -> TranslatedEncoder:
        if source.id != translator.source_encoder or source.dim != translator.source_dim:
            raise ServiceError(
                f"the translator takes {translator.source_encoder} ({translator.source_dim}-d) "
                f"queries, not {source.id} ({source.dim}-d)"
            )
        provenance = {
            "source": source.id,
            "target": translator.target_encoder,
            "method": translator.method,
            "translator_sha256": translator.fingerprint,
        }
        return cls(
            source.spec,
            translator.target_dim,
            source.device,
            source.batch_size,
            provenance,
            source,
            translator,
        )

    @property
    def id(self) -> str:
        assert self.translator is not None
        fingerprint = self.provenance["translator_sha256"][:16]
        return f"{self.provenance['source']}=>{self.translator.target_encoder}@{fingerprint}"

    @property
    def has_image_tower(self) -> bool:
        return self.source is not None and self.source.has_image_tower

    def _text_batch(self, texts: list[str]) -> np.ndarray:
        assert self.source is not None and self.translator is not None
        return self.translator.translate(self.source.encode_text(texts))

    def _image_batch(self, images: list[Any]) -> np.ndarray:
        assert self.source is not None and self.translator is not None
        return self.translator.translate(self.source.encode_image(images))


def translated_encoder(
    path: Path, bundle_encoder: str | None, bundle_dim: int, device: str, batch_size: int
) -> TranslatedEncoder:
    """Load the translator at `path` and its source model; check it targets the bundle's model."""
    translator = QueryTranslator.load(path)
    if translator.target_encoder != bundle_encoder or translator.target_dim != bundle_dim:
        raise ServiceError(
            f"translator {path} maps into {translator.target_encoder} "
            f"({translator.target_dim}-d), but the bundle was built with {bundle_encoder} "
            f"({bundle_dim}-d)"
        )
    source = load_encoder(translator.source_encoder, device=device, batch_size=batch_size)
    return TranslatedEncoder.wrap(source, translator)
