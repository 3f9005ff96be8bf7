"""`strata embed pairs` and `strata eval upgrade` on a small Flickr8k-shaped folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from service.cli import app
from training.corpora.compositional import CompositionalCorpus
from training.cosae.pairs import load_pair, save_pair, synthetic_pair

IMAGES = 60


@pytest.fixture(scope="module")
def flickr(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 images with 5 captions each (compositional scenes); 40 train, 10 dev, 10 test."""
    root = tmp_path_factory.mktemp("flickr8k")
    texts = [r.text for r in CompositionalCorpus(scenes=IMAGES * 5, seed=1)]
    lines = [f"img{n // 5}.jpg#{n % 5}\t{text}" for n, text in enumerate(texts)]
    (root / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    names = [f"img{i}.jpg" for i in range(IMAGES)]
    (root / "Flickr_8k.trainImages.txt").write_text("\n".join(names[:40]) + "\n")
    (root / "Flickr_8k.devImages.txt").write_text("\n".join(names[40:50]) + "\n")
    (root / "Flickr_8k.testImages.txt").write_text("\n".join(names[50:]) + "\n")
    return root


def run(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def pairs(flickr: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pairs")
    args = [
        "embed",
        "pairs",
        "--out",
        str(out),
        "--flickr8k",
        str(flickr),
        "--tfidf-dim",
        "16",
        "--device",
        "cpu",
    ]
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert f"{IMAGES * 5} captions" in result.output
    return out


def test_both_pairs_share_the_minilm_side(pairs: Path):
    layer, tfidf = load_pair(pairs / "layer.npz"), load_pair(pairs / "tfidf.npz")
    assert layer.x_i.shape == (IMAGES * 5, 384) and layer.x_j.shape == (IMAGES * 5, 384)
    assert tfidf.x_j.shape == (IMAGES * 5, 16)
    np.testing.assert_array_equal(layer.x_i, tfidf.x_i)
    assert list(layer.groups[:6]) == ["img0.jpg"] * 5 + ["img1.jpg"]
    assert json.loads((pairs / "layer.json").read_text())["layer"] == 3


def test_eval_upgrade_writes_the_table(pairs: Path, flickr: Path, tmp_path: Path):
    result = run(
        "eval",
        "upgrade",
        "--pair",
        str(pairs / "layer.npz"),
        "--flickr8k",
        str(flickr),
        "--fractions",
        "0.1,1",
        "--methods",
        "procrustes,least-squares",
        "--out",
        str(tmp_path),
        "--no-progress",
    )
    assert result.exit_code == 0, result.output
    table = json.loads((tmp_path / "upgrade.json").read_text())
    assert table["train"] == 200 and table["test"] == 50 and table["test_groups"] == 10
    settings = [(r["setting"].split(" (")[0], r["method"], r["pairs"]) for r in table["rows"]]
    assert settings == [
        ("A/A", None, None),
        ("B/B", None, None),
        ("translated B/A", "procrustes", 20),
        ("translated B/A", "least-squares", 20),
        ("translated B/A", "procrustes", 200),
        ("translated B/A", "least-squares", 200),
    ]
    assert all(0 <= r["r1"] <= 1 and 0 < r["map"] <= 1 for r in table["rows"])
    assert "| A/A (minilm-layer3 queries" in (tmp_path / "upgrade.md").read_text()


def test_eval_upgrade_needs_a_flickr8k_caption_pair(pairs: Path, tmp_path: Path):
    synthetic = run("eval", "upgrade", "--pair", "synthetic", "--out", str(tmp_path))
    assert "needs a Flickr8k caption pair" in str(synthetic.exception)
    save_pair(tmp_path / "ungrouped.npz", synthetic_pair(rows=100))
    ungrouped = run(
        "eval", "upgrade", "--pair", str(tmp_path / "ungrouped.npz"), "--out", str(tmp_path)
    )
    assert "no image groups" in str(ungrouped.exception)
