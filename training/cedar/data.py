"""The rows CEDAR trains and is evaluated on: a cache's embeddings split into train/val/test.

Flickr8k caches carry the official split by image (train, dev, test), the compositional set
its scene split (train, val, test). A cache without a split column is split 80/10/10 by a
seeded permutation of its groups (so captions of one image stay together).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from training.core.cache import EmbeddingCache
from training.core.errors import InputError

VALIDATION_NAMES = ("val", "dev")


@dataclass
class SplitRows:
    embeddings: np.ndarray  # float32 [N, D]
    metadata: pa.Table
    split: np.ndarray  # "train" | "val" | "test" per row
    encoder: str | None

    def rows(self, name: str) -> np.ndarray:
        index = np.flatnonzero(self.split == name)
        if len(index) == 0:
            raise InputError(f"the cache has no {name} rows")
        return index

    def texts(self, index: np.ndarray) -> list[str]:
        if "caption" not in self.metadata.column_names:
            return [str(i) for i in self.metadata.column("id").take(pa.array(index)).to_pylist()]
        return self.metadata.column("caption").take(pa.array(index)).to_pylist()


def load_split_rows(cache_dir: Path, modality: str = "text", seed: int = 0) -> SplitRows:
    cache = EmbeddingCache.open(cache_dir)
    embeddings = np.asarray(cache.embeddings(modality), dtype=np.float32)
    metadata = cache.metadata()
    if "split" in metadata.column_names:
        raw = np.array(metadata.column("split").to_pylist(), dtype=object)
        split = np.where(np.isin(raw, VALIDATION_NAMES), "val", raw).astype(str)
    else:
        groups = np.array(
            metadata.column("group" if "group" in metadata.column_names else "id").to_pylist()
        )
        unique, inverse = np.unique(groups, return_inverse=True)
        draw = np.random.default_rng(seed).random(len(unique))[inverse]
        split = np.where(draw < 0.8, "train", np.where(draw < 0.9, "val", "test"))
    return SplitRows(embeddings, metadata, split, cache.manifest.encoder)


def groups_of(data: SplitRows, rows: np.ndarray) -> list[str]:
    """The group (image) of each row, or its id where the cache has no groups."""
    column = "group" if "group" in data.metadata.column_names else "id"
    return [str(g) for g in data.metadata.column(column).take(pa.array(rows)).to_pylist()]
