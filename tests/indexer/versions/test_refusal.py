"""Refusal of versions that do not verify: every kind of damage to a copy of a version is
caught by `check_servable` (the check every serving path runs), which names the file, and
`strata index publish` refuses such a version in one line, leaving CURRENT where it was.
`Bundle.load` itself refuses a file it would memory-map that differs from the manifest's
record (indexer/format/mapped.py): by its size, else by its sha256, before mapping it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from bundle_inputs import Inputs, assert_one_line_error

from indexer.format.bundle import Bundle
from indexer.format.index_plan import SHORTLIST_RULE
from indexer.format.manifest import MANIFEST, BundleError, read_current
from indexer.format.postings import ROWS
from indexer.format.store import NORMS, ROTATION, SCALES, StoreError
from indexer.verify.check import check_servable
from indexer.verify.faults import VersionRefusedError
from tests.tamper import damages, flip_byte
from training.core.files import sha256_file

# damage → (the reason a replica reports, a text the refusal names)
EXPECTED = {
    "flipped byte: prefix index": ("checksum", "prefix_4.faiss: checksum mismatch"),
    "flipped byte: postings indptr": ("checksum", "postings_indptr.npy: checksum mismatch"),
    "flipped byte: postings rows": ("checksum", "postings_rows.npy: checksum mismatch"),
    "flipped byte: postings chunks": ("checksum", "postings_chunks.npy: checksum mismatch"),
    "flipped byte: postings values": ("checksum", "postings_values.npy: checksum mismatch"),
    "flipped byte: ids": ("checksum", "ids.parquet: checksum mismatch"),
    "flipped byte: artifact weights": (
        "checksum",
        "artifacts/grasp/weights.safetensors: checksum mismatch",
    ),
    "flipped byte: artifact manifest": ("checksum", "artifacts/cedar/manifest.json: checksum"),
    "truncated: prefix index": ("size", "prefix_4.faiss: 4822 bytes, manifest says 9645"),
    "truncated: postings rows": ("size", "postings_rows.npy: 2464 bytes, manifest says 4928"),
    "truncated: ids": ("size", "ids.parquet: 2421 bytes"),
    "flipped byte: manifest": ("manifest", "manifest.json"),
    "manifest edited: rows + 1": ("rows", "prefix_4.faiss: manifest lists 600 rows, bundle 601"),
    "manifest re-listed: prefix rows swapped": (
        "vectors",
        "prefix_4.faiss: row 0 disagrees with prefix_64.faiss",
    ),
    "manifest re-listed: an id dropped": ("rows", "ids.parquet holds 599 rows, manifest says 600"),
    "manifest re-listed: a posting moved": ("postings", "postings_rows.npy: "),
    "partly written: no manifest": ("manifest", "no manifest.json"),
}


@pytest.fixture(scope="module")
def built(inputs: Inputs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("refusal") / "bundles"
    inputs.build(out, store="none")  # damage to the files of a per-prefix layout
    return out


def test_the_table_covers_every_damage(built: Path):
    assert set(damages(built / "v000001")) == set(EXPECTED)


@pytest.mark.parametrize("damage", sorted(EXPECTED))
def test_each_damage_is_refused_naming_the_file(built: Path, tmp_path: Path, damage: str):
    version = Path(shutil.copytree(built / "v000001", tmp_path / "v000001"))
    check_servable(version)  # whole before the damage
    damages(version)[damage](version)
    with pytest.raises(VersionRefusedError) as refused:
        check_servable(version)
    reason, named = EXPECTED[damage]
    message = str(refused.value)
    assert refused.value.reason == reason, message
    assert message.startswith("v000001 does not verify, refused: ") and named in message
    assert "\n" not in message


def test_publish_refuses_a_damaged_version_and_current_stays(
    built: Path, tmp_path: Path, strata_main
):
    bundles = Path(shutil.copytree(built, tmp_path / "bundles"))
    shutil.copytree(bundles / "v000001", bundles / "v000002")
    damages(bundles / "v000002")["flipped byte: prefix index"](bundles / "v000002")
    refused = strata_main("index", "publish", str(bundles), "--version", "2")
    assert_one_line_error(refused, "v000002 does not verify", "prefix_4.faiss: checksum mismatch")
    assert read_current(bundles) == "v000001"
    shutil.rmtree(bundles / "v000002")
    shutil.copytree(bundles / "v000001", bundles / "v000002")
    (bundles / "v000002" / "manifest.json").unlink()  # a partly written copy
    partial = strata_main("index", "publish", str(bundles), "--version", "2")
    assert_one_line_error(partial, "no manifest.json")
    assert read_current(bundles) == "v000001"


# --- refused at open: Bundle.load checks every file it memory-maps --------------------------------


@pytest.fixture(scope="module")
def with_store(inputs: Inputs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A version with the default int8 store, its codes kept one file a block (with its norms,
    block scales and rotation) and, beside it, an index file of the object prefix's own (codes
    reranked from the store)."""
    out = tmp_path_factory.mktemp("refusal-store") / "bundles"
    codes = (f"object={SHORTLIST_RULE.kind}",)
    return Path(inputs.build(out, store="int8", index_types=codes).path)


# the fixture's store is kept by blocks (64 dimensions, prefixes 4 … 64): its first and last files
FIRST_BLOCK, LAST_BLOCK = "store_vectors.0-4.npy", "store_vectors.32-64.npy"


@pytest.fixture
def store_copy(with_store: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(with_store, tmp_path / with_store.name))


@pytest.mark.parametrize("name", [FIRST_BLOCK, LAST_BLOCK, NORMS, SCALES, ROTATION])
def test_a_store_file_cut_by_one_byte_is_refused_at_load_by_its_size(store_copy: Path, name):
    path = store_copy / name
    size = path.stat().st_size
    os.truncate(path, size - 1)  # the same file, one byte shorter
    with pytest.raises(StoreError) as refused:
        Bundle.open_version(store_copy).load()
    message = str(refused.value)
    assert message.startswith(f"{name} in {store_copy} is damaged, refused before it is memory")
    assert f"size {size - 1} bytes, the manifest records {size} bytes" in message
    assert f"`strata index verify {store_copy}`" in message and "\n" not in message


@pytest.mark.parametrize("name", [FIRST_BLOCK, LAST_BLOCK, NORMS, SCALES, ROTATION])
def test_a_store_file_with_a_byte_flipped_is_refused_at_load_by_its_digest(store_copy: Path, name):
    path = store_copy / name
    recorded, size = sha256_file(path), path.stat().st_size
    flip_byte(path)  # the same size
    assert path.stat().st_size == size
    with pytest.raises(StoreError) as refused:
        Bundle.open_version(store_copy).load()
    message = str(refused.value)
    assert message.startswith(f"{name} in {store_copy} is damaged")
    assert f"sha256 {sha256_file(path)}, the manifest records {recorded} (" in message
    assert "strata index verify" in message


def test_a_prefix_index_or_postings_file_is_refused_at_load(store_copy: Path):
    """The files mapped beside the store: each prefix's own index, and the postings."""
    index = next(p.file for p in Bundle.open_version(store_copy).manifest.prefixes if not p.store)
    flip_byte(store_copy / index)
    with pytest.raises(BundleError, match=rf"^{index} in .* sha256 [0-9a-f]{{64}}, the manifest"):
        Bundle.open_version(store_copy).load()
    bundle = Bundle.open_version(store_copy)  # lazily: refused on first use, not mapped
    os.truncate(store_copy / ROWS, (store_copy / ROWS).stat().st_size - 1)
    with pytest.raises(BundleError, match=rf"^{ROWS} in .* is damaged.* size"):
        bundle.postings(0)


def test_files_the_manifest_does_not_record_are_mapped_unchecked(
    with_store: Path, store_copy: Path, inputs: Inputs
):
    """A bundle written before a file had its record still loads (and serves as it did)."""
    manifest = json.loads((store_copy / MANIFEST).read_text())
    for name in (FIRST_BLOCK, LAST_BLOCK, NORMS, ROWS):
        del manifest["files"][name]
    (store_copy / MANIFEST).write_text(json.dumps(manifest))
    old = Bundle.open_version(store_copy).load()
    queries = inputs.embeddings()[::97].astype(np.float32)
    whole = Bundle.open_version(with_store).load()
    for length in old.prefix_lengths:
        np.testing.assert_array_equal(
            old.search(queries, length, 5)[1], whole.search(queries, length, 5)[1]
        )
