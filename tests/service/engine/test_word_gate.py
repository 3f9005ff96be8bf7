"""The gate on a version's learnt word concepts (indexer/vocabulary/word_gate.py): a learnt word
keeps a row in its postings only where the row's hubness-corrected score along the word's text
direction reaches μ + GATE_Z·σ of that score over the gallery.

The premise holds for any readout that keeps its words' text directions: a row's corrected
score is a function of the row and the word alone, and the cut one of the version's kept
moments, so the postings a build keeps are exactly the rows where the margin is ≥ 0 and the
corrected score reaches the cut, whatever the readout learnt."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from indexer.format.bundle import Bundle
from indexer.format.manifest import MANIFEST
from indexer.format.postings import Postings
from indexer.format.served_index import exact_storage
from indexer.update.rows import DeleteConfig, delete_rows
from indexer.verify.check import verify_bundle
from indexer.vocabulary import stored_state as stored
from indexer.vocabulary.gallery_directions import corrected_direction
from indexer.vocabulary.gallery_state import centred_blocks
from indexer.vocabulary.word_gate import GATES, GatePlan
from training.cedar.data import load_split_rows
from training.cedar.gallery_cuts import GATE_Z
from training.core.files import sha256_file

TIE = 1e-4  # a row this close to a cut may fall either side with float rounding


def word_rows(bundle: Bundle, word: int) -> np.ndarray:
    return np.asarray(bundle.postings(bundle.coder.axis_concepts + word)[0])


def corrected_scores(bundle: Bundle) -> np.ndarray:
    """[N, V]: every row's ⟨x̃, t̃_w⟩ − h for every readout word, from the stored rows."""
    storage = exact_storage(bundle.index(bundle.dim))
    features = np.concatenate([x for _, x in centred_blocks(bundle, storage)])
    state = stored.stored_state(bundle)
    assert state is not None
    return features @ bundle.coder.readout.text.T - np.asarray(state.hubs)[:, None]


def test_a_build_keeps_a_learnt_words_rows_only_where_they_pass_its_gate(stated_bundle: Path):
    bundle = Bundle.open(stated_bundle)
    readout = bundle.coder.readout
    cuts = stored.kept_gate(bundle)
    state = stored.stored_state(bundle)
    assert cuts is not None and state is not None and cuts.shape == (len(readout.words),)
    for w in range(len(readout.words)):  # μ + GATE_Z·σ of the kept moments
        expected = state.moments.cut(corrected_direction(readout.text[w]), GATE_Z)
        assert cuts[w] == pytest.approx(expected, abs=1e-6)
    x = load_split_rows(stated_bundle.parent / "cache").embeddings
    margins = bundle.coder.word_margins(x)
    corrected = corrected_scores(bundle)
    removed = 0
    for w in range(len(readout.words)):
        clear = (np.abs(margins[:, w]) > TIE) & (np.abs(corrected[:, w] - cuts[w]) > TIE)
        wanted = (margins[:, w] >= 0) & (corrected[:, w] >= cuts[w])
        kept = np.zeros(bundle.rows, dtype=bool)
        kept[word_rows(bundle, w)] = True
        assert np.array_equal(kept[clear], wanted[clear]), readout.words[w]
        removed += int(((margins[:, w] >= 0) & ~kept).sum())
    record = dict(bundle.manifest.open_vocabulary["gate"])
    assert record.pop("seconds") >= 0
    assert record == {"z": GATE_Z, "file": GATES, "from_row": 0, "entries_removed": removed}
    assert bundle.manifest.postings["entries"] == Postings(bundle.path).entries
    assert verify_bundle(bundle.path).faults == []


def test_rows_before_the_plans_first_are_left_and_the_rest_gated_at_its_cuts(
    stated_bundle: Path, tmp_path: Path
):
    """An add's plan: the base's rows as they were, its new rows at the base's kept cuts (here
    raised to the median score of each word's kept later rows, so that the gate removes rows
    the build kept)."""
    bundle = Bundle.open(stated_bundle)
    first = bundle.rows // 2
    corrected = corrected_scores(bundle)
    cuts = stored.kept_gate(bundle).copy()
    for w in range(len(cuts)):
        late = word_rows(bundle, w)
        late = late[late >= first]
        if len(late):
            cuts[w] = np.median(corrected[late, w])
    record, _ = stored.write_state(tmp_path, bundle, gate=GatePlan(cuts, first))
    assert record is not None and record["gate"]["from_row"] == first
    assert np.array_equal(np.load(tmp_path / GATES), cuts)
    assert record["gate"]["entries_removed"] > 0, "a cut at the median removes rows"
    gated = Postings(tmp_path)
    for w in range(len(bundle.coder.readout.words)):
        before = word_rows(bundle, w)
        after = np.asarray(gated.get(bundle.coder.axis_concepts + w)[0])
        assert np.array_equal(after[after < first], before[before < first])
        late = before[before >= first]
        passing = late[corrected[late, w] >= cuts[w]]
        clear = np.abs(corrected[late, w] - cuts[w]) > TIE
        assert set(after[after >= first]) & set(late[clear]) == set(passing) & set(late[clear])


def test_no_plan_gates_nothing_and_keeps_no_cuts(stated_bundle: Path, tmp_path: Path):
    """A base written before the gate keeps none: its add stays ungated."""
    bundle = Bundle.open(stated_bundle)
    record, _ = stored.write_state(tmp_path, bundle, gate=None)
    assert record is not None and record["gate"] is None
    assert not (tmp_path / GATES).exists() and not (tmp_path / "postings_rows.npy").exists()


def test_a_delete_keeps_the_cuts_and_gates_no_row_again(stated_bundle: Path, tmp_path: Path):
    out = tmp_path / "bundles"
    shutil.copytree(stated_bundle, out)
    base = Bundle.open(out)
    gone = np.arange(0, base.rows, 9)
    delete_rows(DeleteConfig(bundles=out, ids=tuple(base.ids(gone)), keep=2))
    bundle = Bundle.open(out)
    assert np.array_equal(stored.kept_gate(bundle), stored.kept_gate(base))
    assert bundle.manifest.open_vocabulary["gate"]["entries_removed"] == 0
    renamed = np.cumsum(np.isin(np.arange(base.rows), gone, invert=True)) - 1
    for w in range(len(base.coder.readout.words)):
        before = word_rows(base, w)
        expected = renamed[before[~np.isin(before, gone)]]
        assert np.array_equal(word_rows(bundle, w), expected)
    assert verify_bundle(bundle.path).faults == []


def test_verify_refuses_cuts_of_another_vocabulary(stated_bundle: Path, tmp_path: Path):
    out = tmp_path / "bundles"
    shutil.copytree(stated_bundle, out)
    bundle = Bundle.open(out)
    gates = bundle.path / GATES
    np.save(gates, np.zeros(3, dtype=np.float32), allow_pickle=False)
    manifest = json.loads((bundle.path / MANIFEST).read_text())
    manifest["files"][GATES]["sha256"] = sha256_file(gates)
    manifest["files"][GATES]["bytes"] = gates.stat().st_size
    (bundle.path / MANIFEST).write_text(json.dumps(manifest))
    faults = verify_bundle(bundle.path).faults
    assert any(f.kind == "rows" and GATES in f for f in faults), faults
