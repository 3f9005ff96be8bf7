"""`strata index build | verify | info` as a user runs them: output, exit codes, one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bundle_inputs import Inputs, assert_one_line_error

from training.synthetic import random_grasp_artifact


def test_build_then_info_then_verify(strata_main, inputs: Inputs, tmp_path: Path):
    out = tmp_path / "bundles"
    first = strata_main(*inputs.args(out, "--index-type", "object=hnsw"))
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[0] == f"bundle       {out / 'v000001'} (now CURRENT)"
    assert lines[1] == "rows         600 from 3 shards"
    assert lines[2].startswith("indexes      4: HNSW32,Flat, 8: Flat")
    assert lines[3].startswith("time ") and lines[3].endswith("rows/s")
    assert re.match(r"tuned        4: efSearch=\d+ recall@10 [01]\.\d{3} \d+\.\d\d ms$", lines[4])
    assert any(line.strip().startswith("prefix_4.faiss") for line in lines)
    assert any(line.strip().startswith("store_vectors.0-4.npy") for line in lines)
    assert lines[-1].startswith("on disk ")
    second = strata_main(*inputs.args(out, "--keep", "1"))
    assert second.returncode == 0 and "removed      v000001 (--keep)" in second.stdout

    info = strata_main("index", "info", str(out))
    assert info.returncode == 0
    assert info.stdout.startswith("current      v000002 (")
    assert "rows         600 (image), dim 64, encoder synthetic" in info.stdout
    assert "     4 object     Flat (served from the store)  [served from the shared store]\n" in (
        info.stdout
    )
    assert info.stdout.rstrip().splitlines()[-1].startswith("  v000002  CURRENT")
    as_json = json.loads(strata_main("index", "info", str(out), "--json").stdout)
    assert as_json["name"] == "v000002" and as_json["format"] == "strata.index-bundle/1"

    verify = strata_main("index", "verify", str(out), "--sample", "8")
    assert verify.returncode == 0
    assert verify.stdout.strip() == f"{out / 'v000002'}: ok (8 rows checked against the cache)"


def test_a_store_kept_by_rows_is_built_listed_and_verified(
    strata_main, inputs: Inputs, tmp_path: Path
):
    """By default an int8 store is kept one file a block (the build above lists them);
    `--store-layout rows` keeps one file of whole rows, which info lists and verify passes."""
    out = tmp_path / "bundles"
    built = strata_main(*inputs.args(out, "--store-layout", "rows"))
    assert built.returncode == 0, built.stderr
    listed = [line.split()[0] for line in built.stdout.splitlines() if "store_vectors" in line]
    assert listed == ["store_vectors.npy"]
    verify = strata_main("index", "verify", str(out), "--sample", "8")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_store_layout_it_does_not_know_is_one_line(strata_main, inputs: Inputs, tmp_path: Path):
    run = strata_main(*inputs.args(tmp_path / "b", "--store-layout", "columns"))
    assert_one_line_error(run, "--store-layout 'columns': choose rows, blocks")


@pytest.fixture(scope="module")
def other_dim_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return random_grasp_artifact(32).save(tmp_path_factory.mktemp("dim32") / "grasp")


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        ({"--cache": "missing"}, ["embedding cache not found"]),
        ({"--grasp": "missing"}, ["--grasp", "not a transform artifact"]),
        (
            {"--grasp": "dim32"},
            [
                "dimension mismatch: the cache",
                "holds 64-d embeddings",
                "the --grasp artifact",
                "is 32-d",
            ],
        ),
        ({"--cedar": "grasp"}, ["--cedar", "is a 'grasp-vl' artifact, not a CEDAR one"]),
        ({"--grasp": "cedar"}, ["--grasp", "is a CEDAR artifact; pass it as --cedar"]),
        (
            {"--index-type": "24=HNSW32"},
            ["bad --index-type '24=HNSW32'", "'24' is not a prefix of the contract"],
        ),
        ({"--index-type": "object=Bogus"}, ["FAISS cannot build 'Bogus' for prefix length 4"]),
        ({"--index-type": "HNSW32"}, ["expected PREFIX=FACTORY"]),
        ({"--memory-budget": "lots"}, ["bad size 'lots'"]),
        ({"--modality": "text"}, ["has no text embeddings (image)"]),
        ({"--keep": "0"}, ["'--keep'", "greater than or equal to 1"]),
        ({"--engine": "spark"}, ["unknown --engine 'spark' (local | ray)"]),
    ],
    ids=[
        "no-cache",
        "no-artifact",
        "dim",
        "grasp-as-cedar",
        "cedar-as-grasp",
        "prefix",
        "factory",
        "syntax",
        "budget",
        "modality",
        "keep",
        "engine",
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    strata_main, inputs: Inputs, other_dim_artifact: Path, tmp_path: Path, change, fragments
):
    paths = {
        "missing": str(tmp_path / "missing"),
        "dim32": str(other_dim_artifact),
        "grasp": str(inputs.grasp),
        "cedar": str(inputs.cedar),
    }
    args = inputs.args(tmp_path / "bundles")
    for option, value in change.items():
        value = paths.get(value, value)
        if option in args:
            args[args.index(option) + 1] = value
        else:
            args += [option, value]
    assert_one_line_error(strata_main(*args), *fragments)
    assert not (tmp_path / "bundles").exists()


def test_verify_and_info_refuse_what_is_not_a_bundle(strata_main, tmp_path: Path):
    assert_one_line_error(strata_main("index", "verify", str(tmp_path / "x")), "bundle not found")
    assert_one_line_error(strata_main("index", "verify", str(tmp_path)), "neither a bundle")
    assert_one_line_error(strata_main("index", "info", str(tmp_path)), "no published bundle")
