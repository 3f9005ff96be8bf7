"""The `strata` command line: real subprocesses, one-line errors, exit codes a script can test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("strata: error: ")
    for fragment in fragments:
        assert fragment in last


def test_bad_paths_and_names(strata, tmp_path: Path):
    out = str(tmp_path / "out")
    assert_one_line_error(
        strata(
            "embed", "run", "--corpus", "flickr8k", "--path", str(tmp_path / "nope"), "--out", out
        ),
        "not a Flickr8k folder",
    )
    assert_one_line_error(
        strata("embed", "run", "--corpus", "laion", "--path", str(tmp_path), "--out", out),
        "unknown corpus kind 'laion'",
    )
    assert_one_line_error(
        strata("embed", "run", "--corpus", "compositional", "--encoder", "word2vec", "--out", out),
        "unknown encoder 'word2vec'",
    )
    assert_one_line_error(
        strata(
            "embed",
            "run",
            "--corpus",
            "compositional",
            "--encoder",
            "open_clip:ViT-B-32@/x.pt",
            "--out",
            out,
        ),
        "checkpoint file not found",
    )
    assert_one_line_error(
        strata("embed", "info", str(tmp_path / "nope")), "embedding cache not found"
    )
    assert not (tmp_path / "out").exists()


def test_usage_errors_exit_2_without_traceback(strata):
    result = strata("embed", "run", "--bogus")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "No such option" in result.stderr


def test_embed_info_verify_peek(strata, tiny_clip_config: Path, tmp_path: Path):
    texts = tmp_path / "texts.jsonl"
    texts.write_text('{"id": "a", "text": "a dog"}\nnot json\n{"id": "b", "text": "a cat"}\n')
    cache = tmp_path / "cache"
    run = strata(
        "embed",
        "run",
        "--corpus",
        "texts",
        "--path",
        str(texts),
        "--out",
        str(cache),
        "--encoder",
        f"open_clip:{tiny_clip_config}",
        "--no-progress",
        check=True,
    )
    assert (
        "rows         2 of 2 records" in run.stdout and "1 malformed corpus entries" in run.stdout
    )
    assert "RANDOM WEIGHTS" in run.stderr

    info = strata("embed", "info", str(cache), check=True)
    assert "complete" in info.stdout and "dim / dtype  32 / float16" in info.stdout
    manifest = json.loads(strata("embed", "info", str(cache), "--json", check=True).stdout)
    assert manifest["corpus_report"]["skipped"] == 1
    assert manifest["encoder_provenance"]["kind"] == "random"

    assert strata("embed", "verify", str(cache), check=True).stdout.strip().endswith(": ok")
    (cache / "text_emb" / "text_emb_00000.npy").write_bytes(b"tampered")
    verify = strata("embed", "verify", str(cache))
    assert_one_line_error(verify, "1 faults")
    assert "FAULT checksum mismatch: text_emb/text_emb_00000.npy" in verify.stderr

    peek = strata("embed", "peek", "--corpus", "texts", "--path", str(texts), check=True)
    assert "2 records, 1 skipped" in peek.stdout and "texts.jsonl:2: invalid JSON" in peek.stdout
    strict = strata("embed", "peek", "--corpus", "texts", "--path", str(texts), "--strict")
    assert_one_line_error(strict, "texts.jsonl:2")


def test_train_and_eval_grasp(strata, tiny_clip_config: Path, tmp_path: Path):
    cache, artifact, report = tmp_path / "cache", tmp_path / "grasp", tmp_path / "report"
    views = tmp_path / "views.npz"
    encoder = f"open_clip:{tiny_clip_config}"
    strata(
        "embed",
        "run",
        "--corpus",
        "compositional",
        "--scenes",
        "400",
        "--out",
        str(cache),
        "--encoder",
        encoder,
        "--no-progress",
        check=True,
    )
    train = strata(
        "train",
        "grasp",
        "--cache",
        str(cache),
        "--out",
        str(artifact),
        "--epochs",
        "2",
        "--views",
        str(views),
        "--no-progress",
        check=True,
    )
    assert "epochs       2 run" in train.stdout and views.is_file()
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert manifest["method"] == "grasp-vl" and manifest["encoder"] == f"{encoder}@random:0"
    assert manifest["contract"] == {
        "object": 2,
        "attribute": 4,
        "relation": 8,
        "caption": 16,
        "full": 32,
    }

    result = strata(
        "eval",
        "grasp",
        "--cache",
        str(cache),
        "--artifact",
        str(artifact),
        "--out",
        str(report),
        "--views",
        str(views),
        check=True,
    )
    assert "| grasp |" in result.stdout and "| pca |" in result.stdout
    data = json.loads((report / "report.json").read_text())
    assert set(data["methods"]) == {"identity", "pca", "random", "mrl", "mlp", "grasp"}
    assert data["methods"]["grasp"]["drift"] <= 1e-6
    assert (report / "hn_curves.png").read_bytes()[:4] == b"\x89PNG"

    again = strata(
        "train", "grasp", "--cache", str(cache), "--out", str(artifact), "--views", str(views)
    )
    assert_one_line_error(again, "exists; pass --overwrite")
    bad = strata(
        "eval",
        "grasp",
        "--cache",
        str(cache),
        "--out",
        str(report),
        "--views",
        str(views),
        "--baselines",
        "identity,svd",
    )
    assert_one_line_error(bad, "unknown baseline(s) svd")
    flickr_like = strata(
        "train", "grasp", "--cache", str(tmp_path / "nope"), "--out", str(tmp_path / "x")
    )
    assert_one_line_error(flickr_like, "embedding cache not found")
