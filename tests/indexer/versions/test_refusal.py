"""Refusal of versions that do not verify: every kind of damage to a copy of a version is
caught by `check_servable` (the check every serving path runs), which names the file, and
`strata index publish` refuses such a version in one line, leaving CURRENT where it was."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from bundle_inputs import Inputs, assert_one_line_error

from indexer.benchmarks.tamper import damages
from indexer.format.manifest import read_current
from indexer.verify.check import check_servable
from indexer.verify.faults import VersionRefusedError

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
    inputs.build(out)
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
