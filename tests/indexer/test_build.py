"""`build_bundle`: the bundle's search returns the right rows at every prefix, its postings and
ids are those of the cache, its manifest records where everything came from."""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from bundle_inputs import DIM, Inputs, K

from indexer import build
from indexer.build import BufferPool, prefetched
from indexer.bundle import BUNDLE_FORMAT, Bundle, BundleError
from indexer.prefixes import exact_top_k, rotate_rows
from training.cedar.concepts import ConceptCoder
from training.core.artifacts import TransformArtifact
from training.core.cache import EmbeddingCache
from training.core.errors import CacheError
from training.core.files import sha256_file
from training.core.granularity import Granularity
from training.core.metrics import neighbour_recall, prefix_vectors


@pytest.fixture(scope="module")
def built(inputs: Inputs, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("built") / "bundles"
    return inputs.build(out), Bundle.open(out)


def test_each_row_finds_itself_first_and_flat_equals_brute_force(inputs: Inputs, built):
    summary, bundle = built
    assert summary.name == "v000001" and summary.rows == 600 and summary.shards == 3
    assert bundle.prefix_lengths == [4, 8, 16, 32, 64]
    x = inputs.embeddings()
    z = rotate_rows(x, TransformArtifact.load(inputs.grasp))
    queries = np.arange(0, 600, 37)
    for length in bundle.prefix_lengths:
        assert bundle.manifest.prefix(length).factory == "Flat"
        scores, rows = bundle.search(x[queries], length, 10)
        assert rows[:, 0].tolist() == queries.tolist()
        np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-5)
        gallery = prefix_vectors(z, length)
        exact_scores, exact_rows = exact_top_k(gallery, gallery[queries], 10)
        np.testing.assert_array_equal(rows, exact_rows)
        np.testing.assert_allclose(scores, exact_scores, atol=1e-5)
        # rotating once and searching a prefix is the same thing
        again = bundle.search_prefix(length, bundle.rotate(x[queries]), 10)[1]
        np.testing.assert_array_equal(again, rows)


def test_granularities_route_to_their_prefix(built, inputs: Inputs):
    _, bundle = built
    x = inputs.embeddings()[:3]
    assert bundle.prefix_length("object") == DIM // 16
    assert bundle.prefix_length(Granularity.CAPTION) == DIM // 2
    np.testing.assert_array_equal(bundle.search(x, "attribute", 5)[1], bundle.search(x, 8, 5)[1])
    with pytest.raises(BundleError, match="unknown granularity 'scene'"):
        bundle.prefix_length("scene")
    with pytest.raises(BundleError, match="no prefix of length 5"):
        bundle.search(x, 5, 3)
    _, rows = bundle.search(x[:1], 4, 700)  # more than the gallery: −1 past the last hit
    assert (rows[0, :600] >= 0).all() and (rows[0, 600:] == -1).all()
    assert bundle.ids(rows[0, 598:602]) == [*bundle.ids(rows[0, 598:600]), None, None]


def test_postings_ids_and_metadata_are_the_caches(inputs: Inputs, built):
    _, bundle = built
    x = inputs.embeddings()
    concepts, activations = ConceptCoder(TransformArtifact.load(inputs.cedar)).encode(x)
    for concept in range(2 * DIM):
        rows, values = bundle.postings(concept)
        expected_rows, columns = np.nonzero(concepts == concept)
        np.testing.assert_array_equal(rows, expected_rows)
        np.testing.assert_allclose(values, activations[expected_rows, columns], rtol=1e-6)
    assert bundle.manifest.postings == {"concepts": 2 * DIM, "entries": 600 * K, "k": K}
    assert bundle.concepts("+3") == [6] and bundle.concepts(7) == [7]
    assert bundle.ids([0, 599, 250]) == ["row-0", "row-599", "row-250"]
    table = bundle.metadata([5, 1])
    assert table.column_names == ["id", "caption"]
    assert table.column("id").to_pylist() == ["row-5", "row-1"]


def test_the_manifest_records_sources_files_and_indexes(inputs: Inputs, built):
    summary, bundle = built
    manifest = json.loads((bundle.path / "manifest.json").read_text())
    assert manifest["format"] == BUNDLE_FORMAT and manifest["name"] == "v000001"
    assert manifest["rows"] == 600 and manifest["dim"] == DIM and manifest["k"] == K
    assert manifest["contract"] == {
        "object": 4,
        "attribute": 8,
        "relation": 16,
        "caption": 32,
        "full": 64,
    }
    assert manifest["source"]["cache"] == str(inputs.cache.resolve())
    assert manifest["source"]["cache_manifest_sha256"] == sha256_file(
        inputs.cache / "manifest.json"
    )
    for role, path in (("grasp", inputs.grasp), ("cedar", inputs.cedar)):
        source = manifest["artifacts"][role]
        assert source["manifest_sha256"] == sha256_file(path / "manifest.json")
        assert source["weights_sha256"] == sha256_file(path / "weights.safetensors")
        assert TransformArtifact.load(bundle.path / source["copy"]).method == source["method"]
    for name, record in manifest["files"].items():
        assert sha256_file(bundle.path / name) == record["sha256"]
        assert (bundle.path / name).stat().st_size == record["bytes"]
    assert manifest["files"]["prefix_16.faiss"]["rows"] == 600
    assert manifest["files"]["postings_rows.npy"]["rows"] == 600 * K
    assert pq.ParquetFile(bundle.path / "ids.parquet").metadata.num_rows == 600
    assert [p["file"] for p in manifest["prefixes"]] == [
        f"prefix_{n}.faiss" for n in (4, 8, 16, 32, 64)
    ]
    on_disk = {p.relative_to(bundle.path).as_posix() for p in bundle.path.rglob("*") if p.is_file()}
    assert on_disk == {*manifest["files"], "manifest.json"}  # no work files left behind
    assert summary.bytes_on_disk == sum(
        p.stat().st_size for p in bundle.path.rglob("*") if p.is_file()
    )


def test_approximate_indexes_have_high_recall(clustered: Inputs, tmp_path: Path):
    """HNSW, IVF-PQ with exact refine, IVF-PQ with lists on disk and a raw factory, each at one
    prefix of a clustered gallery, against exact search at that prefix."""
    types = ("object=hnsw", "relation=ivfpq-refine", "caption=ivfpq-ondisk", "full=IVF{nlist},Flat")
    summary = clustered.build(tmp_path / "bundles", index_types=types)
    assert summary.training_rows == 3000
    bundle = Bundle.open(tmp_path / "bundles")
    factories = {p.length: (p.factory, p.ondisk) for p in bundle.manifest.prefixes}
    assert factories == {
        4: ("HNSW32,Flat", False),
        8: ("Flat", False),
        16: ("IVF76,PQ4x8np,RFlat", False),
        32: ("IVF76,PQ8x8np", True),
        64: ("IVF76,Flat", False),
    }
    assert (bundle.path / "prefix_32.ivfdata").is_file()
    x = clustered.embeddings()
    z = rotate_rows(x, TransformArtifact.load(clustered.grasp))
    queries = np.arange(0, 3000, 30)
    recalls = {}
    for length in bundle.prefix_lengths:
        gallery = prefix_vectors(z, length)
        _, exact = exact_top_k(gallery, gallery[queries], 10)
        _, found = bundle.search(x[queries], length, 10)
        recalls[length] = neighbour_recall(found, exact)
    assert recalls[8] == 1.0
    assert recalls[4] >= 0.95 and recalls[16] >= 0.9 and recalls[64] >= 0.9, recalls
    assert recalls[32] >= 0.6, recalls  # PQ codes only (8 bytes a row), no exact rerank


def test_the_build_verifies_with_the_digests_it_computed_while_writing(
    inputs: Inputs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The Flat indexes and postings are hashed as they are written; verification gets those
    digests (they are the files' sha256), and reads back only the other files."""
    seen = []
    verify = build.verify_bundle

    def spy(path: Path, **options):
        written = dict(options["written"])
        seen.append((written, {name: sha256_file(path / name) for name in written}))
        return verify(path, **options)

    monkeypatch.setattr(build, "verify_bundle", spy)
    summary = inputs.build(tmp_path / "bundles")
    ((written, actual),) = seen
    assert set(written) == {f"prefix_{n}.faiss" for n in (4, 8, 16, 32, 64)} | {
        "postings_indptr.npy",
        "postings_rows.npy",
        "postings_values.npy",
    }
    assert written == actual
    manifest = Bundle.open(summary.path).manifest
    assert all(manifest.files[name].sha256 == digest for name, digest in written.items())


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


def test_the_local_engine_leaves_blas_as_it_found_it(inputs: Inputs):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    before = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    cache = EmbeddingCache.open(inputs.cache)
    grasp = TransformArtifact.load(inputs.grasp)
    coder = ConceptCoder(TransformArtifact.load(inputs.cedar))
    batches = build.local_batches(cache, "image", grasp, coder)
    next(batches)
    during = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    batches.close()
    after = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    assert during == [1] * len(before) and after == before


def test_pooled_memory_comes_back_only_when_no_view_of_it_is_left():
    pool = BufferPool(keep=1)
    first = pool.take(4, 3)
    first[:] = 7.0
    address = first.ctypes.data
    column = first[1:, 2]  # a slice outlives the array it came from
    del first
    gc.collect()
    assert pool.free == 0
    other = pool.take(4, 3)  # the memory is still in use: a new buffer
    assert other.ctypes.data != address and column.tolist() == [7.0, 7.0, 7.0]
    del column
    gc.collect()
    assert pool.free == 1
    again = pool.take(4, 3)
    assert again.ctypes.data == address and again.shape == (4, 3) and again.dtype == np.float32
    assert pool.free == 0
    assert pool.take(2, 3).ctypes.data != address  # another size: its own buffer
    del other, again
    gc.collect()
    assert pool.free == 1  # at most `keep` free buffers


def test_the_local_engine_hands_out_batches_that_stay_valid(inputs: Inputs):
    """Batches kept by the consumer (here all of them) are never overwritten by later shards."""
    cache = EmbeddingCache.open(inputs.cache)
    grasp = TransformArtifact.load(inputs.grasp)
    coder = ConceptCoder(TransformArtifact.load(inputs.cedar))
    kept = list(build.local_batches(cache, "image", grasp, coder))
    assert [b.first_row for b in kept] == [0, 250, 500]
    x = inputs.embeddings()
    for batch in kept:
        shard = x[batch.first_row : batch.first_row + batch.rows]
        # BLAS may sum in another order here (the build holds it to one thread): equal up to
        # rounding; a batch overwritten by a later shard would differ in every value
        np.testing.assert_allclose(batch.rotated, rotate_rows(shard, grasp), rtol=0, atol=1e-6)
