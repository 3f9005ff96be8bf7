"""`strata eval cds` end to end on a tiny open_clip ViT: table, histogram, scopes in the catalog."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from service.cli import app, main
from training.cds.constructed import synthetic_images
from training.cedar.catalog import catalog_entry
from training.cedar.concepts import ConceptCoder
from training.core.artifacts import TransformArtifact
from training.core.encoders import load_encoder
from training.core.errors import InputError
from training.synthetic import random_cedar_artifact

TINY_VIT = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 48, "layers": 2, "width": 32, "patch_size": 8, "head_width": 16},
    "text_cfg": {"context_length": 24, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}
TINY_RESNET = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": [1, 1, 1, 1], "width": 8},
    "text_cfg": TINY_VIT["text_cfg"],
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Model configs, an image folder (with one undecodable file) and a CEDAR artifact."""
    root = tmp_path_factory.mktemp("cds")
    (root / "tiny-vit.json").write_text(json.dumps(TINY_VIT))
    (root / "tiny-resnet.json").write_text(json.dumps(TINY_RESNET))
    images = root / "images" / "nested"
    images.mkdir(parents=True)
    for i, image in enumerate(synthetic_images(8, size=80, seed=11)):
        image.save(images / f"{i:02d}.png")
    (images / "zz-broken.jpg").write_bytes(b"\xff\xd8 truncated")
    return root


def fresh_artifact(path: Path, dim: int = 32) -> Path:
    random_cedar_artifact(dim, seed=3).save(path, overwrite=True)
    return path


def invoke(args: list[str]):
    return CliRunner().invoke(app, ["eval", "cds", *args])


def one_line_error(args: list[str]) -> str:
    """The InputError the command raised (the strata entry point prints it as one line)."""
    result = invoke(args)
    assert isinstance(result.exception, InputError), result.output
    message = str(result.exception)
    assert "\n" not in message
    return message


def test_cedar_artifact_end_to_end(workdir: Path, tmp_path: Path):
    artifact = fresh_artifact(tmp_path / "cedar")
    weights_before = (artifact / "weights.safetensors").read_bytes()
    out = tmp_path / "report"
    result = invoke(
        [
            "--images",
            str(workdir / "images"),
            "--encoder",
            f"open_clip:{workdir / 'tiny-vit.json'}",
            "--artifact",
            str(artifact),
            "--top-m",
            "4",
            "--layer",
            "-1",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert result.exit_code == 0, result.output
    assert "scopes written to" in result.output

    with (out / "features.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 64 and rows[0]["id"] == "+0" and rows[1]["id"] == "-0"
    assert set(rows[0]) == {"feature", "id", "name", "cds", "outlier_share", "scope", "images"}
    assert all(0 <= int(r["images"]) <= 4 for r in rows)
    assert (out / "cds_histogram.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "features.md").read_text().startswith("# CDS of 64 cedar features")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["images"] == 8 and summary["images_skipped"] == ["nested/zz-broken.jpg"]
    assert summary["layer"] == 2 and summary["geometry"]["shared_patches"] == 25
    assert summary["threshold"]["rule"] in ("otsu", "median")
    assert summary["seconds_per_image"] > 0 and summary["ground_truth"] is None
    assert summary["scopes"]["local"] + summary["scopes"]["global"] == summary["features"]["scored"]

    # the artifact reloads (checksum valid), weights unchanged, scopes readable by the coder
    assert (artifact / "weights.safetensors").read_bytes() == weights_before
    reloaded = TransformArtifact.load(artifact)
    coder = ConceptCoder(reloaded)
    table = {int(r["feature"]): (r["scope"] or None) for r in rows}
    assert [entry.scope for entry in coder.catalog] == [table[c] for c in range(64)]
    assert {entry.scope for entry in coder.catalog} <= {"local", "global", None}
    assert any(entry.scope == "global" for entry in coder.catalog)
    first = reloaded.extra["catalog"][0]
    assert catalog_entry(first).scope == first["scope"] and "cds" in first
    assert reloaded.metrics["cds"]["layer"] == 2 and reloaded.metrics["cds"]["top_m"] == 4
    assert not list(artifact.parent.glob(".cedar.*"))  # no staging folder left behind


def test_a_local_checkpoint_scores_as_the_model_it_holds(workdir: Path, tmp_path: Path):
    """A user's checkpoint file (here: the seed-5 random weights saved) gives the same table."""
    config = workdir / "tiny-vit.json"
    random5 = load_encoder(f"open_clip:{config}@random:5", device="cpu")
    checkpoint = tmp_path / "tiny.pt"
    torch.save({"state_dict": random5.model.state_dict()}, checkpoint)
    tables = []
    for weights in ("random:5", str(checkpoint)):
        out = tmp_path / weights.replace("/", "_")
        result = invoke(
            [
                "--images",
                str(workdir / "images"),
                "--encoder",
                f"open_clip:{config}@{weights}",
                "--artifact",
                str(fresh_artifact(tmp_path / "cedar")),
                "--no-write-scope",
                "--top-m",
                "3",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        assert result.exit_code == 0, result.output
        tables.append((out / "features.csv").read_text())
    assert tables[0] == tables[1]


def test_sae_latents_and_constructed(workdir: Path, tmp_path: Path):
    out = tmp_path / "sae"
    result = invoke(
        [
            "--images",
            str(workdir / "images"),
            "--encoder",
            f"open_clip:{workdir / 'tiny-vit.json'}",
            "--sae-latents",
            "64",
            "--sae-k",
            "4",
            "--sae-epochs",
            "2",
            "--top-m",
            "3",
            "--threshold",
            "median",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "features.json").read_text())
    assert len(rows) == 64 and rows[5]["id"] == "latent-5"
    assert json.loads((out / "summary.json").read_text())["threshold"]["rule"] == "median"

    out = tmp_path / "constructed"
    result = invoke(
        ["--constructed", "--synthetic", "16", "--top-m", "6", "--out", str(out), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    truth = json.loads((out / "summary.json").read_text())["ground_truth"]
    assert truth["auc"] >= 0.95 and truth["by_kind"]["register"]["mean_outlier_share"] == 1.0
    assert "truth" in json.loads((out / "features.json").read_text())[0]


def test_bad_input_is_one_line(workdir: Path, tmp_path: Path):
    vit = f"open_clip:{workdir / 'tiny-vit.json'}"
    images = str(workdir / "images")
    artifact = str(fresh_artifact(tmp_path / "cedar"))
    out = str(tmp_path / "out")
    common = ["--out", out, "--no-progress"]
    assert "image folder not found" in one_line_error(
        ["--images", str(tmp_path / "nope"), "--encoder", vit, "--artifact", artifact, *common]
    )
    assert "--layer must be between 0 and 2" in one_line_error(
        ["--images", images, "--encoder", vit, "--artifact", artifact, "--layer", "3", *common]
    )
    assert "needs a ViT image tower" in one_line_error(
        [
            "--images",
            images,
            "--encoder",
            f"open_clip:{workdir / 'tiny-resnet.json'}",
            "--artifact",
            artifact,
            *common,
        ]
    )
    assert "--shift must be between 1 and 4" in one_line_error(
        ["--images", images, "--encoder", vit, "--artifact", artifact, "--shift", "5", *common]
    )
    assert "the artifact is 64-d" in one_line_error(
        [
            "--images",
            images,
            "--encoder",
            vit,
            "--artifact",
            str(fresh_artifact(tmp_path / "wide", 64)),
            *common,
        ]
    )
    assert "not both" in one_line_error(
        ["--images", images, "--artifact", artifact, "--sae-latents", "64", *common]
    )
    assert "say which features" in one_line_error(["--images", images, *common])
    assert "multiple of the token width 32" in one_line_error(
        ["--images", images, "--encoder", vit, "--sae-latents", "48", *common]
    )
    assert not Path(out).exists()


def test_the_strata_entry_point_exits_2(
    workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    argv = [
        "strata",
        "eval",
        "cds",
        "--images",
        str(tmp_path / "missing"),
        "--constructed",
        "--out",
        str(tmp_path / "out"),
    ]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error[-1].startswith("strata: error: image folder not found")
