"""The shard engines: prefetching in order and bounded, the local engine's threads and batches."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
import threadpoolctl
from bundle_inputs import Inputs

from indexer.build.engines import local_batches, prefetched
from indexer.build.shard_step import ShardSource
from indexer.format.prefixes import rotate_rows
from training.cedar.concepts import ConceptCoder
from training.core.artifacts import TransformArtifact
from training.core.cache import EmbeddingCache
from training.core.errors import CacheError


def counted(n: int, produced: list[int]) -> Iterator[int]:
    for item in range(n):
        produced.append(item)
        yield item


def test_prefetching_keeps_the_order_and_runs_a_bounded_way_ahead():
    produced: list[int] = []
    for item in prefetched(counted(30, produced), 2):
        # consumed: item + 1; queued: at most 2; the producer may hold one more
        assert len(produced) <= item + 1 + 2 + 1
    assert produced == list(range(30))


def test_a_producer_error_arrives_in_its_place():
    def failing() -> Iterator[int]:
        yield 1
        yield 2
        raise CacheError("shard 3: not an array")

    got = []
    with pytest.raises(CacheError, match="shard 3: not an array"):
        for item in prefetched(failing(), 1):
            got.append(item)
    assert got == [1, 2]


def test_closing_stops_the_producer_and_closes_its_items():
    produced: list[int] = []
    cleaned = threading.Event()

    def items() -> Iterator[int]:
        try:
            yield from counted(10_000, produced)
        finally:
            cleaned.set()

    prefetching = prefetched(items(), 1)
    assert [next(prefetching) for _ in range(3)] == [0, 1, 2]
    prefetching.close()
    assert not any(t.name == "prefetch" for t in threading.enumerate())
    assert cleaned.is_set()  # the producer's generator ran its cleanup (a BLAS limit, a pool)
    assert len(produced) <= 3 + 1 + 1


def global_blas_threads() -> list[int]:
    """Thread counts of the BLAS libraries whose count is process-wide (pthreads builds); an
    OpenMP build's (faiss's openblas) is a per-thread setting, which the engine's thread sets
    for itself and this thread cannot read."""
    return [
        p["num_threads"]
        for p in threadpoolctl.threadpool_info()
        if p["user_api"] == "blas" and p.get("threading_layer") != "openmp"
    ]


def test_the_local_engine_leaves_blas_as_it_found_it(inputs: Inputs):
    before = global_blas_threads()
    cache = EmbeddingCache.open(inputs.cache)
    grasp = TransformArtifact.load(inputs.grasp)
    coder = ConceptCoder(TransformArtifact.load(inputs.cedar))
    batches = local_batches(ShardSource(cache, "image", grasp, coder))
    next(batches)
    during = global_blas_threads()
    batches.close()
    after = global_blas_threads()
    assert during == [1] * len(before) and after == before


def test_the_local_engine_hands_out_batches_that_stay_valid(inputs: Inputs):
    """Batches kept by the consumer (here all of them) are never overwritten by later shards."""
    cache = EmbeddingCache.open(inputs.cache)
    grasp = TransformArtifact.load(inputs.grasp)
    coder = ConceptCoder(TransformArtifact.load(inputs.cedar))
    kept = list(local_batches(ShardSource(cache, "image", grasp, coder)))
    assert [b.first_row for b in kept] == [0, 250, 500]
    x = inputs.embeddings()
    for batch in kept:
        shard = x[batch.first_row : batch.first_row + batch.rows]
        # BLAS may sum in another order here (the build holds it to one thread): equal up to
        # rounding; a batch overwritten by a later shard would differ in every value
        np.testing.assert_allclose(batch.rotated, rotate_rows(shard, grasp), rtol=0, atol=1e-6)
