"""The shared vector store (indexer/format/store/): one copy of every row serves every Flat
prefix, and reranks the shortlist codes of the shortest (indexer/format/store_rerank.py).

Against the layout before it (one float32 file per prefix) on the same rows: the same hits at
every prefix to float16 rounding, fewer bytes, the same verification; adds and deletes equal a
full build of the same rows; a bundle written the old way (int64 postings rows, float32
activations, no chunk table, no store record) still loads, verifies and serves, and a delete
from it writes the compact postings."""

from __future__ import annotations

import json
from pathlib import Path

import faiss
import numpy as np
import pytest
from bundle_inputs import Inputs, Parts, gaussian_unit_rows

from indexer.format.bundle import Bundle
from indexer.format.index_plan import SHORTLIST_RULE
from indexer.format.manifest import MANIFEST, BundleError
from indexer.format.postings import CHUNKS, ROWS, VALUES, Postings
from indexer.format.prefixes import exact_top_k
from indexer.format.served.params import SearchParams
from indexer.format.store import (
    NORMS,
    ROTATION,
    SCALES,
    TOLERANCE,
    VECTORS,
    StoreError,
    VectorStore,
    encode_rows,
    head_norms,
    heads,
)
from indexer.format.store.block_codes import (
    block_ends,
    block_rotation,
    decode_heads,
    encode_rotated,
)
from indexer.format.store.top_k import merge_top_k
from indexer.format.store.writer import StoreWriter, store_record, write_rotation
from indexer.format.store_rerank import StoreRerank
from indexer.update.rows import AddConfig, DeleteConfig, add_rows, delete_rows
from indexer.verify.check import verify_bundle
from training.core.cache import EmbeddingCache
from training.core.files import sha256_file
from training.core.metrics import neighbour_recall, prefix_vectors


@pytest.mark.parametrize("dtype", ["float16", "int8"])
def test_the_heads_of_the_codes_are_the_prefix_vectors_to_their_rounding(dtype: str):
    rows = gaussian_unit_rows(200, 64, 1)
    codes = encode_rows(rows, dtype)
    norms = head_norms(codes, [8, 32, 64])
    for j, length in enumerate((8, 32, 64)):
        got = heads(codes, length, norms[:, j])
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
        assert np.abs(got - prefix_vectors(rows, length)).max() < TOLERANCE[dtype]
        np.testing.assert_allclose(got, heads(codes, length), atol=1e-6)  # norms or computed


def decaying_rows(n: int, dim: int, seed: int) -> np.ndarray:
    """Unit rows whose coordinate j has variance ∝ 1 / (j + 1), as a learnt rotation orders
    them: the late coordinates far smaller than the first."""
    rows = np.random.default_rng(seed).normal(size=(n, dim)) / np.sqrt(np.arange(dim) + 1.0)
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_the_rotation_is_orthogonal_within_each_prefix_block():
    ends = block_ends([8, 32], 64)
    assert ends == (8, 32, 64)
    rotation = block_rotation(ends, seed=3)
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(64), atol=1e-5)
    assert not rotation[:8, 8:].any() and not rotation[8:32, 32:].any()  # block-diagonal
    np.testing.assert_array_equal(rotation, block_rotation(ends, seed=3))


def test_rotated_blocks_code_decaying_rows_closer_than_one_scale_per_row():
    """The premise built in: late coordinates far smaller than the first. Their own grid per
    block must then lose less than the largest coordinate's grid at every prefix, and less than
    half past the first block, where the late coordinates come in."""
    rows, lengths = decaying_rows(1000, 64, 4), [8, 32, 64]
    ends = block_ends(lengths, 64)
    rotation = block_rotation(ends)
    codes, scales = encode_rotated(rows, rotation, ends)
    assert codes.dtype == np.int8 and scales.shape == (1000, 3)
    assert np.abs(codes).max(axis=0).max() == 127
    per_row = encode_rows(rows, "int8")
    for length in lengths:
        exact = prefix_vectors(rows, length)
        back = (
            heads(decode_heads(codes, scales, ends, length), length) @ rotation[:length, :length].T
        )
        rotated_error = np.square(back - exact).sum(axis=1).mean()
        per_row_error = np.square(heads(per_row, length) - exact).sum(axis=1).mean()
        assert rotated_error < per_row_error / (2 if length > 8 else 1), (
            length,
            rotated_error,
            per_row_error,
        )
        assert np.abs(back - exact).max() < TOLERANCE["int8"]


def test_a_rotated_store_reads_rows_and_scores_as_the_rows_own_space(tmp_path: Path):
    """Read back through VectorStore: p̂_L in the rows' space at every prefix, inside a block
    too; scores equal to rows · query; the exact scan finds the rows themselves."""
    rows, lengths = decaying_rows(300, 64, 5), [8, 32, 64]
    rotation = block_rotation(block_ends(lengths, 64))
    writer = StoreWriter(tmp_path, 300, 64, lengths, "int8", rotation=rotation)
    writer.add(rows[:100])
    writer.add(rows[100:])
    writer.close()
    write_rotation(tmp_path, rotation)
    store = VectorStore(tmp_path, store_record("int8", lengths, rotated=True))
    assert store.rotation is not None and {SCALES, ROTATION} <= {p.name for p in tmp_path.iterdir()}
    picked = np.array([0, 7, 299])
    for length in (8, 20, 32, 64):
        got = store.prefix_rows(picked, length)
        assert np.abs(got - prefix_vectors(rows[picked], length)).max() < TOLERANCE["int8"]
        np.testing.assert_allclose(got, store.block(0, 300, length)[picked], atol=1e-6)
        query = prefix_vectors(rows[[7]], length)[0]
        np.testing.assert_allclose(
            store.prefix_scores(picked, length, query), got @ query, atol=1e-5
        )
        np.testing.assert_allclose(
            store.block_scores(0, 300, length, query[None])[0, picked], got @ query, atol=1e-5
        )
    _, found = store.scan(prefix_vectors(rows[:20], 64), 64, 1)
    np.testing.assert_array_equal(found[:, 0], np.arange(20))


def test_an_unknown_store_dtype_is_refused_by_name():
    with pytest.raises(StoreError, match="unknown store dtype 'bfloat16'"):
        encode_rows(gaussian_unit_rows(2, 8, 0), "bfloat16")


def test_top_k_merged_block_by_block_is_the_exact_top_k():
    gallery, queries = gaussian_unit_rows(500, 16, 2), gaussian_unit_rows(5, 16, 3)
    best = (np.zeros((5, 0), np.float32), np.zeros((5, 0), np.int64))
    for start in range(0, 500, 64):
        block = gallery[start : start + 64]
        best = merge_top_k(best, queries @ block.T, np.arange(start, start + len(block)), 10)
    expected_scores, expected_rows = exact_top_k(gallery, queries, 10)
    np.testing.assert_array_equal(best[1], expected_rows)
    np.testing.assert_allclose(best[0], expected_scores, rtol=0, atol=1e-6)


@pytest.fixture(scope="module")
def layouts(inputs: Inputs, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Bundle]:
    """The same rows built the old way (a file per prefix), with each store dtype (a gallery
    this small: every prefix a scan of the store), and with the shortest prefix as codes
    reranked from the int8 store (what a gallery past SMALL_GALLERY rows gets: `codes`)."""
    root = tmp_path_factory.mktemp("layouts")
    built = {
        store: Bundle.open(inputs.build(root / store, store=store).path).load()
        for store in ("none", "float16", "int8")
    }
    shortest = min(built["int8"].prefix_lengths)
    codes = inputs.build(root / "codes", index_types=(f"{shortest}={SHORTLIST_RULE.kind}",))
    built["codes"] = Bundle.open(codes.path).load()
    return built


def test_a_small_store_bundle_keeps_no_file_of_its_own_for_any_prefix(layouts):
    old, new = layouts["none"], layouts["float16"]
    files = set(new.manifest.files)
    assert {VECTORS, NORMS} <= files
    assert all(p.store and not p.rerank for p in new.manifest.prefixes)
    assert not {f for f in files if f.startswith("prefix_")}
    assert new.manifest.store["dtype"] == "float16"
    assert old.manifest.store is None and not any(p.store for p in old.manifest.prefixes)
    assert np.load(new.path / ROWS, mmap_mode="r").dtype == np.uint16  # compact postings
    assert np.load(new.path / VALUES, mmap_mode="r").dtype == np.float16
    assert np.load(new.path / CHUNKS).shape == (new.manifest.postings["concepts"], 2)
    assert sum(f.bytes for f in new.manifest.files.values()) < sum(
        f.bytes for f in old.manifest.files.values()
    )


@pytest.mark.parametrize(
    ("store", "against"), [("float16", "none"), ("int8", "none"), ("codes", "int8")]
)
def test_a_store_bundle_finds_what_the_old_layout_finds_at_every_prefix(
    layouts, store, against, inputs
):
    """Against the float32 layout; the codes against the exact scan of their own store: tuned
    to recall@10 0.95 on 256 held-out rows, so on these few queries a little below it."""
    old, new = layouts[against], layouts[store]
    queries = inputs.embeddings()[::17].astype(np.float32)
    for length in old.prefix_lengths:
        _, expected = old.search(queries, length, 10)
        scores, found = new.search(queries, length, 10)
        assert neighbour_recall(found, expected) >= (0.9 if store == "codes" else 0.95), length
        assert (np.diff(scores, axis=1) <= 1e-6).all()  # best first
    assert verify_bundle(new.path, cache_dir=inputs.cache, sample=16).faults == []


def test_codes_reranked_from_the_store_return_the_stores_scores(layouts, inputs):
    bundle = layouts["codes"]
    shortest = min(bundle.prefix_lengths)
    entry = bundle.manifest.prefix(shortest)
    assert entry.rerank and not entry.store and entry.factory.endswith(",SQ8")
    assert entry.tuning is not None and "k_factor_rf=" in entry.search  # tuned with the rerank
    index = bundle.index(shortest)
    assert isinstance(index, StoreRerank)
    queries = prefix_vectors(bundle.rotate(inputs.embeddings()[::23].astype(np.float32)), shortest)
    scores, rows = bundle.search_prefix(shortest, queries, 10)
    for query, found, got in zip(queries, rows, scores, strict=True):
        exact = bundle.store.prefix_scores(found, shortest, query)  # the store's, not the codes'
        np.testing.assert_allclose(got, exact, rtol=0, atol=1e-6)
    # every list probed and every row fetched: the rerank is then an exact scan of the store
    every = f"nprobe={faiss.extract_index_ivf(index.base.faiss).nlist},k_factor_rf={bundle.rows}"
    _, everything = index.search(queries, 10, SearchParams.parse(every))
    _, scanned = bundle.store.scan(queries, shortest, 10)
    np.testing.assert_array_equal(everything, scanned)


@pytest.mark.parametrize("store", ["float16", "int8"])
def test_a_store_scores_rows_as_their_prefix_vectors_do(layouts, store):
    shared = layouts[store].store
    rows = np.array([5, 0, 41, 7, 7, 19], dtype=np.int64)  # unsorted, a repeat
    query = gaussian_unit_rows(1, shared.dim, 9)[0]
    for length in sorted({*shared.lengths, 3, shared.dim - 1}):  # stored norms and computed
        q = prefix_vectors(query[None, :], length)[0]
        got = shared.prefix_scores(rows, length, q)
        assert got.dtype == np.float32 and got.shape == (len(rows),)
        np.testing.assert_allclose(got, shared.prefix_rows(rows, length) @ q, atol=1e-6)
    assert shared.prefix_scores(np.zeros(0, np.int64), 8, query[:8]).shape == (0,)


@pytest.mark.parametrize(
    ("dtype", "codes"), [("float16", VECTORS), ("int8", "store_vectors.*.npy")]
)
def test_verify_catches_store_norms_edited_with_the_manifest_to_match(
    layouts, tmp_path: Path, dtype: str, codes: str
):
    import shutil

    copy = tmp_path / "v"
    shutil.copytree(layouts[dtype].path, copy)
    norms = np.load(copy / NORMS)
    norms[0] *= 2
    np.save(copy / NORMS, norms)
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["files"][NORMS]["sha256"] = sha256_file(copy / NORMS)
    (copy / MANIFEST).write_text(json.dumps(manifest))
    faults = verify_bundle(copy, sample=0).faults
    said = f"{NORMS}: row 0's norms disagree with {codes} ("  # the codes' files, by name
    assert any(f.kind == "vectors" and said in f for f in faults), faults


def test_add_and_delete_on_a_store_bundle_equal_a_full_build(parts: Parts, tmp_path: Path):
    out = tmp_path / "bundles"
    parts.build("A", out, store="float16")
    summary = add_rows(AddConfig(bundles=out, cache=parts.caches["B"], progress=False))
    assert summary.actions[VECTORS].startswith("copied + extended")
    rebuilt = Bundle.open(parts.build("AB", tmp_path / "ab", store="float16").path)
    ours = Bundle.open(out)
    for name in (VECTORS, NORMS, ROWS):
        assert ours.manifest.files[name].sha256 == rebuilt.manifest.files[name].sha256, name
    assert verify_bundle(ours.path, sample=16).faults == []
    delete_rows(DeleteConfig(bundles=out, ids=tuple(parts.b_ids)))
    back = Bundle.open(out)
    first = Bundle.open(parts.build("A", tmp_path / "a", store="float16").path)
    assert back.rows == first.rows
    np.testing.assert_array_equal(back.store.codes, first.store.codes)
    np.testing.assert_array_equal(back.store.norms, first.store.norms)
    x = EmbeddingCache.open(parts.caches["A"]).embeddings("image")[::9].astype(np.float32)
    for length in back.prefix_lengths:
        np.testing.assert_array_equal(back.search(x, length, 5)[1], first.search(x, length, 5)[1])
    assert verify_bundle(back.path, sample=0).faults == []


def test_add_and_delete_on_a_store_kept_by_blocks_equal_a_full_build(parts: Parts, tmp_path: Path):
    out = tmp_path / "bundles"
    parts.build("A", out, store_layout="blocks")
    summary = add_rows(AddConfig(bundles=out, cache=parts.caches["B"], progress=False))
    assert summary.actions["store_vectors.*.npy"].startswith("copied + extended")
    rebuilt = Bundle.open(parts.build("AB", tmp_path / "ab", store_layout="blocks").path)
    ours = Bundle.open(out)
    assert ours.store.layout == "blocks" and ours.manifest.store["blocks"]
    for name in [*ours.manifest.store["blocks"], NORMS, SCALES]:
        assert ours.manifest.files[name].sha256 == rebuilt.manifest.files[name].sha256, name
    assert verify_bundle(ours.path, sample=16).faults == []
    delete_rows(DeleteConfig(bundles=out, ids=tuple(parts.b_ids)))
    back = Bundle.open(out)
    first = Bundle.open(parts.build("A", tmp_path / "a", store_layout="blocks").path)
    assert back.store.layout == "blocks"
    np.testing.assert_array_equal(np.asarray(back.store.codes), np.asarray(first.store.codes))
    x = EmbeddingCache.open(parts.caches["A"]).embeddings("image")[::9].astype(np.float32)
    for length in back.prefix_lengths:
        np.testing.assert_array_equal(back.search(x, length, 5)[1], first.search(x, length, 5)[1])
    assert verify_bundle(back.path, sample=0).faults == []


def write_the_old_layout(version: Path) -> None:
    """Rewrite a version (built without a store) as the writer before the store wrote it:
    int64 postings rows, float32 activations, no chunk table, no `store` record in the manifest
    or its prefix entries."""
    postings = Postings(version)
    rows, values = postings.rows[:], postings.values[:]
    del postings
    np.save(version / ROWS, rows, allow_pickle=False)
    np.save(version / VALUES, values, allow_pickle=False)
    (version / CHUNKS).unlink()
    manifest = json.loads((version / MANIFEST).read_text())
    manifest.pop("store")
    for entry in manifest["prefixes"]:
        entry.pop("store")
        entry.pop("rerank")
    del manifest["files"][CHUNKS]
    for name in (ROWS, VALUES):
        record = manifest["files"][name]
        record["sha256"], record["bytes"] = (
            sha256_file(version / name),
            (version / name).stat().st_size,
        )
    (version / MANIFEST).write_text(json.dumps(manifest, indent=2))


def test_a_bundle_written_before_the_store_still_loads_verifies_and_serves(
    inputs: Inputs, layouts, tmp_path: Path
):
    version = Path(inputs.build(tmp_path / "old", store="none").path)
    write_the_old_layout(version)
    assert np.load(version / ROWS, mmap_mode="r").dtype == np.int64
    assert np.load(version / VALUES, mmap_mode="r").dtype == np.float32
    assert not (version / CHUNKS).exists()
    assert "store" not in json.loads((version / MANIFEST).read_text())
    assert verify_bundle(version, cache_dir=inputs.cache, sample=16).faults == []
    old = Bundle.open_version(version).load()
    assert old.store is None
    queries = inputs.embeddings()[::29].astype(np.float32)
    for length in old.prefix_lengths:
        np.testing.assert_array_equal(
            old.search(queries, length, 10)[1], layouts["none"].search(queries, length, 10)[1]
        )
    concept = int(np.argmax(np.diff(old._postings.indptr)))
    rows, values = old.postings(concept)
    assert rows.dtype == np.int64 and (np.diff(rows) > 0).all() and len(rows) == len(values)
    np.testing.assert_array_equal(rows, layouts["float16"].postings(concept)[0])
    gone = int(rows[1])
    delete_rows(DeleteConfig(bundles=tmp_path / "old", ids=tuple(old.ids([gone]))))
    new = Bundle.open(tmp_path / "old")
    assert CHUNKS in new.manifest.files and new._postings.stored_rows.dtype == np.uint16
    assert verify_bundle(new.path, sample=0).faults == []
    kept = rows[rows != gone]
    np.testing.assert_array_equal(new.postings(concept)[0], kept - (kept > gone))


def test_index_info_prints_bytes_per_row_per_part(layouts, strata_main):
    from indexer.format.footprint import footprint

    bundle = layouts["float16"]
    parts = {p.name: p for p in footprint(bundle.manifest)}
    assert set(parts) >= {"store", "postings", "ids", "artifacts"}
    rows, dim = bundle.rows, bundle.dim
    assert parts["store"].disk > rows * dim * 2  # float16 codes, plus the norms and headers
    assert sum(p.disk for p in parts.values()) == sum(
        f.bytes for f in bundle.manifest.files.values()
    )
    run = strata_main("index", "info", "--bundles", str(bundle.path.parent))
    assert run.returncode == 0, run.stderr
    assert "resident B/row" in run.stdout and "served from the store" in run.stdout
    lines = [line.split() for line in run.stdout.splitlines()]
    assert ["store", "float16", "(bytes", "per", "row:)"] in lines
    row = next(w for w in lines if len(w) == 3 and w[0] == "store")
    assert float(row[1]) == pytest.approx(parts["store"].disk / rows, abs=0.1)


def test_a_store_on_disk_is_counted_on_disk_not_resident(inputs: Inputs, strata_main, tmp_path):
    from indexer.format.footprint import footprint

    out = tmp_path / "bundles"
    built = strata_main(*inputs.args(out, "--store-on-disk"))
    assert built.returncode == 0, built.stderr
    bundle = Bundle.open(out).load()
    assert bundle.manifest.store["on_disk"] and bundle.store.on_disk
    parts = {p.name: p for p in footprint(bundle.manifest)}
    assert parts["store"].resident == 0 and parts["store"].disk > bundle.rows * bundle.dim
    # filters read the postings' rows; activations only for the rows an explanation shows
    values = bundle.manifest.files["postings_values.npy"].bytes
    assert 0 < parts["postings"].resident == parts["postings"].disk - values
    rows, _, activations = bundle.entries_of_rows(0, np.arange(min(5, bundle.rows)))
    assert len(rows) and np.isfinite(activations).all()
    for concept in range(0, bundle.coder.concepts, 7):  # what a filter reads: rows alone
        np.testing.assert_array_equal(bundle.concept_rows(concept), bundle.postings(concept)[0])
    with pytest.raises(BundleError, match="outside"):
        bundle.concept_rows(bundle.coder.concepts)
    info = strata_main("index", "info", "--bundles", str(out))
    lines = [line.split() for line in info.stdout.splitlines()]
    assert "store        int8, on disk: read through mmap for reranks (bytes per row:)" in (
        info.stdout
    )
    store_row = next(w for w in lines if len(w) == 3 and w[0] == "store")
    assert float(store_row[2]) == 0.0  # part, disk B/row, resident B/row
    refused = strata_main(*inputs.args(tmp_path / "none", "--store", "none", "--store-on-disk"))
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "strata: error: --store-on-disk needs a store: --store int8 or float16"
    )


def test_add_and_delete_keep_codes_reranked_from_the_store(parts: Parts, tmp_path: Path):
    out = tmp_path / "bundles"
    shortest = min(Bundle.open(parts.build("A", tmp_path / "probe").path).prefix_lengths)
    codes = (f"{shortest}={SHORTLIST_RULE.kind}",)
    parts.build("A", out, index_types=codes)
    add_rows(AddConfig(bundles=out, cache=parts.caches["B"], progress=False))
    added = Bundle.open(out).load()
    entry = added.manifest.prefix(shortest)
    assert entry.rerank and isinstance(added.index(shortest), StoreRerank)
    assert added.index(shortest).ntotal == added.rows == added.store.rows
    assert verify_bundle(added.path, sample=16).faults == []
    x = EmbeddingCache.open(parts.caches["B"]).embeddings("image")[::7].astype(np.float32)
    _, found = added.search(x, shortest, 10)
    _, scanned = added.store.scan(prefix_vectors(added.rotate(x), shortest), shortest, 10)
    assert neighbour_recall(found, scanned) >= 0.9  # the added rows are found through the codes
    delete_rows(DeleteConfig(bundles=out, ids=tuple(parts.b_ids)))
    back = Bundle.open(out).load()
    assert back.index(shortest).ntotal == back.rows and back.manifest.prefix(shortest).rerank
    assert verify_bundle(back.path, sample=16).faults == []


def test_a_pass_over_a_store_on_disk_lets_its_pages_go_and_reads_the_same(layouts):
    """Scans and blocks of a store on disk drop the pages they read (MADV_DONTNEED) and
    answer as the same store held in RAM does, before and after."""
    from indexer.format.store import VectorStore

    held = layouts["int8"]
    record = {**held.manifest.store, "on_disk": True}
    on_disk = VectorStore(held.path, record)
    queries = gaussian_unit_rows(3, held.dim, 5)
    for length in held.store.lengths:
        q = prefix_vectors(queries, length)
        for _ in range(2):  # the second pass faults the released pages back in
            np.testing.assert_array_equal(
                on_disk.scan(q, length, 7)[1], held.store.scan(q, length, 7)[1]
            )
            np.testing.assert_array_equal(
                on_disk.block(3, 40, length), held.store.block(3, 40, length)
            )
