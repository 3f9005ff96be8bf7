"""Versions of a bundle directory: numbering, retention, the build lock, leftovers; a served
version's files left whole while new versions are written beside it."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from bundle_inputs import Inputs

from indexer.build.full import build_bundle
from indexer.format.bundle import Bundle
from indexer.format.manifest import BundleError, read_current
from indexer.format.prefix_writers import write_index_file
from indexer.format.store import NORMS, VECTORS
from indexer.format.store.writer import StoreWriter
from indexer.update.rows import DeleteConfig, delete_rows
from indexer.versions.bundle_store import BundleStore
from service.engine.search import SearchEngine
from service.results import SearchQuery
from training.core.files import sha256_file


def names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


def test_retention_keeps_the_last_n_and_numbers_only_grow(inputs: Inputs, tmp_path: Path):
    out = tmp_path / "bundles"
    built = [inputs.build(out, keep=2) for _ in range(4)]
    assert [s.name for s in built] == ["v000001", "v000002", "v000003", "v000004"]
    assert built[2].removed_versions == ["v000001"] and built[3].removed_versions == ["v000002"]
    assert names(out) == ["CURRENT", "v000003", "v000004"]
    assert (out / "CURRENT").read_text() == "v000004\n"
    assert Bundle.open(out).name == "v000004"
    # even with every version folder gone, numbers are not reused: CURRENT says v000004
    shutil.rmtree(out / "v000003")
    shutil.rmtree(out / "v000004")
    assert BundleStore(out).next_version() == 5
    assert inputs.build(out, keep=1).name == "v000005"
    assert names(out) == ["CURRENT", "v000005"]


def test_the_current_version_is_never_removed(inputs: Inputs, tmp_path: Path):
    out = tmp_path / "bundles"
    for _ in range(3):
        inputs.build(out, keep=5)
    store = BundleStore(out)
    store.switch("v000001")  # an operator rolled back
    assert store.retain(1) == ["v000002"]
    assert names(out) == ["CURRENT", "v000001", "v000003"]
    assert Bundle.open(out).name == "v000001"
    with pytest.raises(BundleError, match="cannot publish 'v000002'"):
        store.switch("v000002")


def test_a_publish_hook_sees_the_new_version_current(inputs: Inputs, tmp_path: Path):
    out = tmp_path / "bundles"
    seen = []
    inputs.build(out)
    summary = build_bundle(
        inputs.config(out, keep=1),
        on_published=lambda path: seen.append((path.name, read_current(out), names(out))),
    )
    # announced once CURRENT moved, before retention removed v000001
    assert seen == [("v000002", "v000002", ["CURRENT", "v000001", "v000002"])]
    assert summary.removed_versions == ["v000001"]


def test_one_build_at_a_time(inputs: Inputs, tmp_path: Path):
    out = tmp_path / "bundles"
    with BundleStore(out).lock(), pytest.raises(BundleError, match="another build is writing"):
        inputs.build(out)
    assert inputs.build(out).name == "v000001"  # the lock went with its holder


def test_leftovers_of_killed_builds_are_cleaned(inputs: Inputs, tmp_path: Path):
    out = tmp_path / "bundles"
    inputs.build(out)
    (out / ".tmp-v000002-999").mkdir()
    (out / ".tmp-v000002-999" / "prefix_4.faiss").write_bytes(b"half")
    (out / ".trash-v000000-998").mkdir()
    (out / ".CURRENT.tmp-997").write_text("v000002\n")
    summary = inputs.build(out)
    assert summary.name == "v000002"
    assert sorted(p.name for p in summary.cleaned) == [
        ".CURRENT.tmp-997",
        ".tmp-v000002-999",
        ".trash-v000000-998",
    ]
    assert BundleStore(out).leftovers() == []


def test_an_output_that_is_a_file_is_refused(inputs: Inputs, tmp_path: Path):
    (tmp_path / "taken").write_text("")
    with pytest.raises(BundleError, match=r"cannot write bundles to .*taken"):
        inputs.build(tmp_path / "taken")


def test_open_refuses_what_is_not_a_bundle(tmp_path: Path):
    with pytest.raises(BundleError, match="bundle directory not found"):
        Bundle.open(tmp_path / "nope")
    with pytest.raises(BundleError, match="no published bundle"):
        Bundle.open(tmp_path)
    (tmp_path / "CURRENT").write_text("latest\n")
    with pytest.raises(BundleError, match="not a version name"):
        Bundle.open(tmp_path)


def test_a_served_version_keeps_its_files_while_new_versions_are_published_beside_it(
    inputs: Inputs, tmp_path: Path
):
    """An engine serves v000001 (store, prefix index and postings memory-mapped) while a
    rebuild publishes v000002 and a delete, which reads v000001's files, publishes v000003:
    no file of v000001 is rewritten (each keeps its inode and sha256) and the engine answers
    as it did."""
    out = tmp_path / "bundles"
    inputs.build(out, store="float16")
    engine = SearchEngine(Bundle.open(out), None)
    served = engine.bundle.path
    assert engine.bundle.store is not None

    def files() -> dict[str, tuple[int, str]]:
        names = engine.bundle.manifest.files
        return {name: ((served / name).stat().st_ino, sha256_file(served / name)) for name in names}

    queries = [
        SearchQuery.of(vector=row, granularity=granularity, k=5)
        for row in inputs.embeddings()[::150].astype(np.float32)
        for granularity in engine.bundle.manifest.contract
    ]

    def answers() -> list[list[tuple[str, float]]]:
        return [[(h.id, h.score) for h in r.hits] for r in engine.search_batch(queries)]

    before, answered = files(), answers()
    inputs.build(out, store="float16")
    delete_rows(DeleteConfig(bundles=out, ids=(engine.bundle.ids([0])[0],)))
    assert read_current(out) == "v000003" and served.name == "v000001"
    assert files() == before
    assert answers() == answered


def test_a_writer_pointed_at_an_existing_file_fails_and_leaves_it_whole(
    inputs: Inputs, tmp_path: Path
):
    """The writers create their files new ("xb"): aimed at a version's folder they stop before
    truncating a file a server may have mapped."""
    built = inputs.build(tmp_path / "bundles", store="float16", index_types=("object=hnsw",))
    version = Bundle.open_version(built.path)
    before = {name: sha256_file(version.path / name) for name in (VECTORS, NORMS)}
    store = version.store
    with pytest.raises(FileExistsError):
        StoreWriter(version.path, store.rows, store.dim, store.lengths, store.dtype)
    entry = next(p for p in version.manifest.prefixes if not p.store)
    digest = sha256_file(version.path / entry.file)
    with pytest.raises(FileExistsError):
        write_index_file(version.index(entry.length).faiss, version.path / entry.file)
    assert sha256_file(version.path / entry.file) == digest
    assert {name: sha256_file(version.path / name) for name in before} == before
