"""The open vocabulary's gallery state kept in the version (indexer/vocabulary/stored_state.py):
a bundle whose CEDAR readout keeps its words' text directions has its state measured when the
version is written, and the service reads it instead of measuring it at the first phrase.

The premise holds for any trained CEDAR: the kept state is what the service measures from the
same rows and the same directions, so a phrase's rows are the same either way; and a row's hub
value is a function of the row alone, so a version without some rows keeps the others' values."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

from indexer.format.bundle import Bundle
from indexer.format.manifest import MANIFEST
from indexer.update.rows import DeleteConfig, delete_rows
from indexer.verify.check import verify_bundle
from indexer.vocabulary import stored_state as stored
from indexer.vocabulary.gallery_directions import SIZING_ROWS
from service.engine import open_vocabulary
from service.engine.open_vocabulary import OpenVocabulary
from training.core.files import sha256_file

PHRASES = ("giraffe", "teddy bear", "a red ball")


def without_state(bundle: Bundle) -> Bundle:
    """The same version, its kept state unseen: the service measures it."""
    return Bundle(bundle.path, dataclasses.replace(bundle.manifest, open_vocabulary=None))


def test_a_build_keeps_the_state_and_verifies(stated_bundle: Path):
    bundle = Bundle.open(stated_bundle)
    record = bundle.manifest.open_vocabulary
    assert record is not None and record["hub_words"] == len(bundle.coder.readout.words)
    assert record["sketch"] is None  # a gallery a phrase scans needs none
    files = bundle.manifest.files
    assert files[stored.HUBS].rows == bundle.rows
    assert files[stored.SIZING].rows == min(bundle.rows, SIZING_ROWS)
    assert verify_bundle(bundle.path).faults == []


def test_the_kept_state_is_the_one_the_service_measures(stated_bundle: Path, minilm):
    bundle = Bundle.open(stated_bundle)
    kept = stored.stored_state(bundle)
    measured = OpenVocabulary(without_state(bundle), minilm.encode_text).measured()
    assert kept is not None
    assert kept.z == measured.z
    assert np.allclose(kept.hubs, measured.hubs, atol=1e-6)
    assert np.allclose(kept.moments.mean, measured.moments.mean, atol=1e-9)
    assert np.allclose(kept.moments.second, measured.moments.second, atol=1e-9)
    assert np.array_equal(kept.moments.sizing, measured.moments.sizing)


def test_a_phrase_reads_the_kept_state_and_finds_the_measured_ones_rows(
    stated_bundle: Path, minilm, monkeypatch: pytest.MonkeyPatch
):
    bundle = Bundle.open(stated_bundle)
    measuring = OpenVocabulary(without_state(bundle), minilm.encode_text)
    expected = {p: measuring.concept(p) for p in PHRASES}

    def refused(*_args, **_kwargs):
        raise AssertionError("the version keeps its state: nothing is measured")

    monkeypatch.setattr(open_vocabulary, "measured_state", refused)
    reading = OpenVocabulary(bundle, minilm.encode_text)
    for phrase in PHRASES:
        made = reading.concept(phrase)
        assert made.cut == pytest.approx(expected[phrase].cut, abs=1e-5)
        assert np.array_equal(made.rows.materialise(), expected[phrase].rows.materialise())


def test_a_delete_measures_the_state_again_and_keeps_each_rows_hub_value(
    stated_bundle: Path, minilm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The version written without five rows has its own state: every kept row's hub value as
    before, and (past the sketch limit, lowered here) a sketch that the first phrase searches
    at once, finding the rows a scan finds."""
    out = tmp_path / "bundles"
    shutil.copytree(stated_bundle, out)
    base = Bundle.open(out)
    gone = np.arange(5)
    monkeypatch.setattr(stored, "SKETCH_ROWS", 0)
    delete_rows(DeleteConfig(bundles=out, ids=tuple(base.ids(gone)), keep=2))
    bundle = Bundle.open(out)
    assert bundle.rows == base.rows - len(gone)
    before, after = stored.stored_state(base), stored.stored_state(bundle)
    assert before is not None and after is not None
    assert np.allclose(after.hubs, np.delete(before.hubs, gone), atol=1e-6)
    assert bundle.manifest.open_vocabulary["sketch"] == stored.SKETCH
    assert verify_bundle(bundle.path).faults == []

    monkeypatch.setattr(open_vocabulary, "SEARCH_SHARE", 1)  # a search may score every row
    vocabulary = OpenVocabulary(bundle, minilm.encode_text, scan_rows=0)
    made = vocabulary.concept("teddy bear")
    assert made.found == "search"  # the kept sketch, read at the first phrase
    direction = vocabulary.directions(vocabulary.embed(["teddy bear"]))[0]
    scanned = np.flatnonzero(vocabulary.corrected_scores(direction) >= made.cut)
    assert np.array_equal(made.rows.materialise(), scanned)


def test_the_same_version_gets_the_same_state_bytes(
    stated_bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(stored, "SKETCH_ROWS", 0)  # the sketch too
    bundle = Bundle.open(stated_bundle)
    written = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        record, files = stored.write_state(tmp_path / name, bundle)
        assert record is not None and (tmp_path / name / stored.SKETCH) in files
        written.append({path.name: path.read_bytes() for path in files})
    assert written[0] == written[1]


def test_verify_refuses_a_state_that_is_not_the_versions(stated_bundle: Path, tmp_path: Path):
    """Hub values of another row count, re-listed in the manifest with their own digest (so that
    only a check of what the file holds can see it), and a z that is no number."""
    out = tmp_path / "bundles"
    shutil.copytree(stated_bundle, out)
    bundle = Bundle.open(out)
    hubs = bundle.path / stored.HUBS
    np.save(hubs, np.zeros(bundle.rows - 1, dtype=np.float32), allow_pickle=False)
    files = dict(bundle.manifest.files)
    files[stored.HUBS] = dataclasses.replace(
        files[stored.HUBS], sha256=sha256_file(hubs), bytes=hubs.stat().st_size
    )
    record = {**bundle.manifest.open_vocabulary, "z": None}
    manifest = dataclasses.replace(bundle.manifest, files=files, open_vocabulary=record)
    (bundle.path / MANIFEST).write_text(manifest.to_json())
    faults = verify_bundle(bundle.path).faults
    assert any(f.kind == "rows" and stored.HUBS in f for f in faults), faults
    assert any(f.kind == "manifest" and "z None" in f for f in faults), faults


def test_a_readout_that_cannot_cut_a_phrase_keeps_no_state(stated_bundle: Path, tmp_path: Path):
    """No teacher, no recorded z, no zero-shot word: the version is still written, without a
    state (the service then refuses each phrase with the reason)."""
    bundle = Bundle.open(stated_bundle)  # its own coder: the readout changed here only
    readout = bundle.coder.readout
    readout.precision = [None] * len(readout.words)
    bundle.coder.artifact.extra["readout"]["training"].pop("zero_shot_z")
    assert stored.write_state(tmp_path, bundle) == (None, {})
    assert list(tmp_path.iterdir()) == []


def test_known_hub_values_are_carried_and_only_the_rows_past_them_scored(
    stated_bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """An add or a delete carries its base's rows' hub values (each a function of its row
    alone): given them for the first rows, the state keeps them as given (here shifted, so that
    a value scored again would show) and scores the others as a full measurement does."""
    monkeypatch.setattr(stored, "SAMPLE_ROWS", 64)  # the every-row pass, not the sample's
    bundle = Bundle.open(stated_bundle)
    for name in ("full", "carried"):
        (tmp_path / name).mkdir()
    full, _ = stored.write_state(tmp_path / "full", bundle)
    measured = np.load(tmp_path / "full" / stored.HUBS)
    first = bundle.rows // 2 + 7
    known = measured[:first] + np.float32(0.5)
    record, _ = stored.write_state(tmp_path / "carried", bundle, known_hubs=known)
    assert full is not None and record is not None
    carried = np.load(tmp_path / "carried" / stored.HUBS)
    assert np.array_equal(carried[:first], known)
    assert np.allclose(carried[first:], measured[first:], atol=1e-6)
