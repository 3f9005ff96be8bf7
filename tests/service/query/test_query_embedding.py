"""Query embeddings: timed into the observer a caller passes, deduplicated through the cache."""

from __future__ import annotations

import numpy as np

from service.query.cache import QueryCache
from service.query.embedding import embed_texts, encode


class FakeEncoder:
    id, dim, has_image_tower = "fake", 4, True

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode_text(self, texts):
        self.calls.append(list(texts))
        return np.stack([np.full(self.dim, len(t), dtype=np.float32) for t in texts])

    def encode_image(self, images):
        return np.ones((len(images), self.dim), dtype=np.float32)


class Observer:
    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def observe_encoder(self, modality: str, size: int, seconds: float) -> None:
        assert seconds >= 0
        self.seen.append((modality, size))


def test_each_encoder_call_is_timed_into_the_observer_given():
    encoder, observer = FakeEncoder(), Observer()
    assert encode(encoder, "image", ["a", "b"], observer).shape == (2, 4)
    assert encode(encoder, "text", iter(["abc"]), observer).shape == (1, 4)
    encode(encoder, "text", ["x"], None)  # no observer: not timed
    assert observer.seen == [("image", 2), ("text", 1)]


def test_texts_go_through_the_cache_once_per_normalised_text():
    encoder, observer = FakeEncoder(), Observer()
    cache = QueryCache(size=8)
    try:
        rows = embed_texts(encoder, cache, ["A dog", "a  dog", "a cat"], observer)
        assert encoder.calls == [["a dog", "a cat"]] and observer.seen == [("text", 2)]
        np.testing.assert_array_equal(rows[0], rows[1])
        again = embed_texts(encoder, cache, ["a dog", "a cat"], observer)
        assert len(encoder.calls) == 1  # both from the cache
        np.testing.assert_array_equal(again[1], rows[2])
    finally:
        cache.close()
    plain = embed_texts(encoder, None, ["a", "bb"], None)
    assert [row[0] for row in plain] == [1.0, 2.0]
