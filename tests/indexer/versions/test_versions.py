"""Versions of a bundle directory: numbering, retention, the build lock, leftovers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from bundle_inputs import Inputs

from indexer.build.full import build_bundle
from indexer.format.bundle import Bundle
from indexer.format.manifest import BundleError, read_current
from indexer.versions.bundle_store import BundleStore


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
