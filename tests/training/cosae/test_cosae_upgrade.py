"""The upgrade path's pieces: grouped retrieval, the translator artifact, the upgrade table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from training.core.errors import InputError
from training.core.metrics import unit_rows
from training.cosae.config import CosaeConfig
from training.cosae.metrics import grouped_retrieval
from training.cosae.upgrade import (
    QueryTranslator,
    fit_translator,
    held_out_scores,
    upgrade_markdown,
    upgrade_table,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def grouped_rows(groups: int = 60, per_group: int = 5, dim: int = 16, seed: int = 0):
    """Unit rows around one centre per group, and the group of each row."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((groups, dim))
    labels = np.repeat(np.arange(groups), per_group)
    rows = centres[labels] + 0.4 * rng.standard_normal((len(labels), dim))
    return unit_rows(rows), labels


class TestGroupedRetrieval:
    def test_hand_computed_ranks(self):
        # query 0's neighbours by cosine: row 1 (other group), then row 2 (its group)
        gallery = unit_rows(np.array([[1, 0], [0.9, 0.1], [0.7, 0.7], [0, 1]], float))
        groups = np.array(["a", "b", "a", "b"])
        scores = grouped_retrieval(gallery, gallery, groups)
        sims = gallery @ gallery.T
        expected_ap, expected_top = [], []
        for q in range(4):
            order = [r for r in np.argsort(-sims[q], kind="stable") if r != q]
            relevant = [groups[r] == groups[q] for r in order]
            rank = relevant.index(True) + 1
            expected_ap.append(1 / rank)  # one relevant row per query here
            expected_top.append(rank == 1)
        assert scores["r1"] == pytest.approx(np.mean(expected_top))
        assert scores["map"] == pytest.approx(np.mean(expected_ap))
        assert expected_ap[0] == pytest.approx(0.5) and not expected_top[0]

    def test_perfect_and_shuffled_queries(self):
        rows, labels = grouped_rows()
        exact = grouped_retrieval(rows, rows, labels)
        assert exact["r1"] > 0.9 and exact["map"] > 0.8
        shuffled = np.random.default_rng(1).permutation(rows)
        chance = grouped_retrieval(shuffled, rows, labels)
        assert chance["r1"] < 0.2 and chance["map"] < 0.2

    def test_rejects_misaligned_input(self):
        rows, labels = grouped_rows()
        with pytest.raises(ValueError, match="differ"):
            grouped_retrieval(rows, rows[:-1], labels)
        with pytest.raises(ValueError, match="single row"):
            grouped_retrieval(rows[:3], rows[:3], np.arange(3))


def rotated_pair(rows: np.ndarray, out_dim: int = 12, seed: int = 2) -> np.ndarray:
    """Model A's rows: a fixed linear map of B's plus a little noise, renormalised."""
    rng = np.random.default_rng(seed)
    mixing = rng.standard_normal((rows.shape[1], out_dim))
    return unit_rows(rows @ mixing + 0.01 * rng.standard_normal((len(rows), out_dim)))


class TestTranslator:
    @pytest.mark.parametrize("method", ["procrustes", "least-squares"])
    def test_linear_translators_recover_a_linear_relation(self, method: str, tmp_path: Path):
        source, _ = grouped_rows()
        target = rotated_pair(source)
        translator = fit_translator(source, target, 200, method, "model-b", "model-a")
        scores = held_out_scores(translator, source[200:], target[200:])
        assert scores["cosine"] > (0.95 if method == "least-squares" else 0.7)
        assert scores["r1"] > (0.9 if method == "least-squares" else 0.3)
        out = translator.save(tmp_path / "translator")
        loaded = QueryTranslator.load(out)
        np.testing.assert_array_equal(loaded.translate(source), translator.translate(source))
        assert loaded.fingerprint == translator.fingerprint
        assert np.allclose(np.linalg.norm(loaded.translate(source), axis=1), 1, atol=1e-5)

    def test_cosae_translator_round_trips(self, tmp_path: Path):
        source, _ = grouped_rows()
        target = rotated_pair(source)
        config = CosaeConfig(
            n_concepts=32, k_i=4, k_j=4, steps=40, batch_size=64, paired_batch_size=32, log_every=20
        )
        translator = fit_translator(source, target, 30, "cosae", "model-b", "model-a", config)
        translator.info = {"paired": {"pairs": 30}}
        out = translator.save(tmp_path / "translator")
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["method"] == "cosae" and manifest["paired"] == {"pairs": 30}
        loaded = QueryTranslator.load(out)
        np.testing.assert_allclose(
            loaded.translate(source), translator.translate(source), atol=1e-6
        )
        with pytest.raises(InputError, match="exists"):
            translator.save(out)
        translator.save(out, overwrite=True)
        assert not list(tmp_path.glob(".translator*"))  # no staging folder left behind

    def test_bad_input_is_named(self, tmp_path: Path):
        source, _ = grouped_rows()
        target = rotated_pair(source)
        with pytest.raises(InputError, match="unknown method"):
            fit_translator(source, target, 10, "magic", "b", "a")
        with pytest.raises(InputError, match="pairs for"):
            fit_translator(source, target, 0, "procrustes", "b", "a")
        translator = fit_translator(source, target, 50, "procrustes", "b", "a")
        with pytest.raises(InputError, match=r"\[N, 16\]"):
            translator.translate(target)
        with pytest.raises(InputError, match="not a query translator"):
            QueryTranslator.load(tmp_path)
        out = translator.save(tmp_path / "t")
        (out / "manifest.json").write_text(json.dumps({"format": "other"}))
        with pytest.raises(InputError, match="unsupported translator format"):
            QueryTranslator.load(out)


def test_upgrade_table_rows_and_baselines():
    source, labels = grouped_rows(groups=80)
    target = rotated_pair(source)
    train, test = np.arange(0, 300), np.arange(300, 400)
    table = upgrade_table(
        source,
        target,
        labels,
        train,
        test,
        [0.1, 1.0],
        ["procrustes", "least-squares"],
        ("model-b", "model-a"),
    )
    rows = table["rows"]
    methods = [r["method"] for r in rows]
    assert methods == [None, None, "procrustes", "least-squares", "procrustes", "least-squares"]
    a_a = grouped_retrieval(target[test], target[test], labels[test])
    assert rows[0]["r1"] == pytest.approx(a_a["r1"]) and rows[0]["map"] == pytest.approx(a_a["map"])
    assert [r["pairs"] for r in rows[2:]] == [30, 30, 300, 300]
    full_lsq = rows[-1]
    assert full_lsq["map"] > 0.9 * rows[0]["map"]  # a linear relation, all pairs: as good as A/A
    text = upgrade_markdown(table)
    assert "translated B/A | least-squares | 1 | 300" in text
