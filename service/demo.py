"""The main job on the embedded default: real captions, the MiniLM encoder, local files only.

Today it embeds Flickr8k's captions (or the compositional set when the shared data is absent)
into an embedding cache and shows, for a few queries, the nearest captions in that cache.
Later stages (transforms, index bundle, service) join it as they land.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from training.corpora import Corpus, open_corpus
from training.embedding.cache import EmbeddingCache
from training.embedding.encoders import Encoder, load_encoder
from training.embedding.job import EmbedConfig, EmbedSummary, embed_corpus
from training.settings import StrataSettings

log = logging.getLogger(__name__)

DEMO_QUERIES = ("a dog playing in the sea", "a child in a red shirt", "people riding bicycles")


@dataclass
class DemoResult:
    corpus: str
    summary: EmbedSummary
    neighbours: dict[str, list[tuple[float, str]]]


def demo_corpus(settings: StrataSettings) -> tuple[str, Corpus]:
    flickr = settings.data_dir / "flickr8k"
    if (flickr / "Flickr8k.token.txt").is_file():
        return "flickr8k", open_corpus("flickr8k", flickr)
    log.warning("no Flickr8k at %s: using the compositional set instead", flickr)
    return "compositional", open_corpus("compositional", scenes=20_000)


def nearest_captions(
    cache: EmbeddingCache, encoder: Encoder, queries: tuple[str, ...], k: int = 3
) -> dict[str, list[tuple[float, str]]]:
    """Exact cosine top-k of each query over the cache's text rows (a preview, not the index)."""
    gallery = cache.embeddings("text")
    captions = cache.metadata().column("caption").to_pylist()
    scores = encoder.encode_text(list(queries)) @ gallery.T
    top = np.argsort(-scores, axis=1)[:, :k]
    return {q: [(float(scores[i, j]), captions[j]) for j in top[i]] for i, q in enumerate(queries)}


def run_demo(
    settings: StrataSettings, out: Path | None = None, progress: bool = True
) -> DemoResult:
    name, corpus = demo_corpus(settings)
    encoder = load_encoder("minilm", device=settings.device, batch_size=settings.batch_size)
    cache_dir = out or settings.runs_dir / "demo" / f"cache-{name}-minilm"
    config = EmbedConfig(
        shard_rows=settings.shard_rows, dtype=settings.cache_dtype, progress=progress
    )
    summary = embed_corpus(corpus, encoder, cache_dir, config)
    neighbours = nearest_captions(EmbeddingCache.open(cache_dir), encoder, DEMO_QUERIES)
    return DemoResult(name, summary, neighbours)
