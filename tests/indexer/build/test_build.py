"""`build_bundle`: the bundle's search returns the right rows at every prefix, its postings and
ids are those of the cache, its manifest records where everything came from."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from bundle_inputs import DIM, Inputs, K

from indexer.build import full
from indexer.format.bundle import Bundle
from indexer.format.manifest import BUNDLE_FORMAT, BundleError
from indexer.format.postings import VALUE_ATOL, VALUE_RTOL
from indexer.format.prefixes import exact_top_k, rotate_rows
from indexer.format.store import TOLERANCE
from training.cedar.concepts import ConceptCoder
from training.core.artifacts import TransformArtifact
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
    tolerance = TOLERANCE[bundle.manifest.store["dtype"]]
    for length in bundle.prefix_lengths:
        entry = bundle.manifest.prefix(length)  # a small gallery: a scan of the store's heads
        assert entry.factory == "Flat" and entry.store
        scores, rows = bundle.search(x[queries], length, 10)
        # each row finds itself, within the codes' rounding of the best score (at 4 dims
        # another row may round above it)
        at = np.argmax(rows == queries[:, None], axis=1)
        assert (rows[np.arange(len(queries)), at] == queries).all()
        assert (scores[:, 0] - scores[np.arange(len(queries)), at] <= 2 * tolerance).all()
        gallery = prefix_vectors(z, length)
        stored = bundle.store.prefix_rows(np.arange(bundle.rows), length)
        assert np.abs(stored - gallery).max() < tolerance  # the codes round p_L
        # exact over what the store holds: brute force over its decoded heads
        exact_scores, exact_rows = exact_top_k(stored, gallery[queries], 10)
        np.testing.assert_array_equal(rows, exact_rows)
        np.testing.assert_allclose(scores, exact_scores, atol=1e-5)
        float_rows = exact_top_k(gallery, gallery[queries], 10)[1]
        assert neighbour_recall(rows, float_rows) >= 0.9  # and near float32 brute force
        # rotating once and searching a prefix is the same thing
        again = bundle.search_prefix(length, bundle.rotate(x[queries]), 10)[1]
        np.testing.assert_array_equal(again, rows)


def test_granularities_route_to_their_prefix(built, inputs: Inputs):
    _, bundle = built
    x = inputs.embeddings()[:3]
    assert bundle.prefix_length("object") == DIM // 16
    assert bundle.prefix_length(Granularity.CAPTION) == DIM // 2
    np.testing.assert_array_equal(bundle.search(x, "attribute", 5)[1], bundle.search(x, 8, 5)[1])
    assert bundle.prefix_length(" Relation ") == DIM // 4
    with pytest.raises(BundleError, match="unknown granularity 'scene'; choose from object, "):
        bundle.prefix_length("scene")
    with pytest.raises(BundleError, match="unknown granularity 'auto'"):  # a bundle has no AUTO
        bundle.prefix_length("auto")
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
        expected = activations[expected_rows, columns]  # stored as float16: to its rounding
        np.testing.assert_allclose(values, expected, rtol=VALUE_RTOL, atol=VALUE_ATOL)
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
    assert manifest["files"]["store_vectors.npy"]["rows"] == 600
    assert manifest["files"]["postings_rows.npy"]["rows"] == 600 * K
    assert manifest["files"]["postings_chunks.npy"]["rows"] == 2 * DIM  # a row per concept
    assert pq.ParquetFile(bundle.path / "ids.parquet").metadata.num_rows == 600
    # the default layout of a small gallery: every prefix an exact scan of the int8 store
    assert manifest["store"]["dtype"] == "int8" and not manifest["store"]["on_disk"]
    assert [(p["file"], p["store"]) for p in manifest["prefixes"]] == [
        ("store_vectors.npy", True)
    ] * 5
    on_disk = {p.relative_to(bundle.path).as_posix() for p in bundle.path.rglob("*") if p.is_file()}
    assert on_disk == {*manifest["files"], "manifest.json"}  # no work files left behind
    assert summary.bytes_on_disk == sum(
        p.stat().st_size for p in bundle.path.rglob("*") if p.is_file()
    )


def test_approximate_indexes_have_high_recall(clustered: Inputs, tmp_path: Path):
    """HNSW, IVF-PQ with exact refine, IVF-PQ with lists on disk and a raw factory, each at one
    prefix of a clustered gallery, against exact search at that prefix."""
    types = ("object=hnsw", "relation=ivfpq-refine", "caption=ivfpq-ondisk", "full=IVF{nlist},Flat")
    summary = clustered.build(tmp_path / "bundles", index_types=types, store="none")
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
    verify = full.verify_bundle

    def spy(path: Path, **options):
        written = dict(options["written"])
        seen.append((written, {name: sha256_file(path / name) for name in written}))
        return verify(path, **options)

    monkeypatch.setattr(full, "verify_bundle", spy)
    summary = inputs.build(tmp_path / "bundles")
    ((written, actual),) = seen
    store = {"store_vectors.npy", "store_norms.npy", "store_scales.npy", "store_rotation.npy"}
    assert set(written) == store | {
        "postings_indptr.npy",
        "postings_rows.npy",
        "postings_chunks.npy",
        "postings_values.npy",
    }
    assert written == actual
    manifest = Bundle.open(summary.path).manifest
    assert all(manifest.files[name].sha256 == digest for name, digest in written.items())
