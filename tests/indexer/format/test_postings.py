"""Concept postings: the transpose of the [N, k] code table, as CSR, built from shard runs."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from indexer.format import postings, postings_writer
from indexer.format.postings import FILES, Postings, csr_from_runs, postings_faults, shard_postings
from indexer.format.postings_writer import PostingsWriter, concept_blocks
from training.core.files import sha256_file

CONCEPTS = 10


def random_codes(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    concepts = np.stack([rng.choice(CONCEPTS, k, replace=False) for _ in range(n)])
    return concepts, rng.random((n, k)).astype(np.float32)


def brute_force(concepts: np.ndarray, activations: np.ndarray, concept: int):
    rows, cols = np.nonzero(concepts == concept)
    return rows, activations[rows, cols]


def test_runs_merge_into_the_transpose(tmp_path: Path):
    concepts, activations = random_codes(50, 3, 0)
    cuts = [0, 20, 21, 50]
    runs = [
        shard_postings(concepts[a:b], activations[a:b], a, CONCEPTS)
        for a, b in itertools.pairwise(cuts)
    ]
    indptr, rows, values = csr_from_runs(runs, CONCEPTS)
    writer = PostingsWriter(tmp_path, tmp_path, CONCEPTS)
    for run in runs:
        writer.add(run)
    writer.close()
    on_disk = Postings(tmp_path)
    np.testing.assert_array_equal(on_disk.indptr, indptr)
    for concept in range(CONCEPTS):
        expected_rows, expected_values = brute_force(concepts, activations, concept)
        np.testing.assert_array_equal(rows[indptr[concept] : indptr[concept + 1]], expected_rows)
        got_rows, got_values = on_disk.get(concept)
        np.testing.assert_array_equal(got_rows, expected_rows)
        np.testing.assert_array_equal(got_values, expected_values)
    assert postings_faults(indptr, rows, values, 50, 3) == []
    assert not list(tmp_path.glob("postings-run-*"))  # work files removed


def test_faults_are_found():
    concepts, activations = random_codes(30, 2, 1)
    indptr, rows, values = csr_from_runs(
        [shard_postings(concepts, activations, 0, CONCEPTS)], CONCEPTS
    )
    bad = indptr.copy()
    bad[3] = bad[4] + 1
    assert "not monotone" in " ".join(postings_faults(bad, rows, values, 30, 2))
    out_of_range = rows.copy()
    out_of_range[5] = 30
    assert "outside [0, 30)" in " ".join(postings_faults(indptr, out_of_range, values, 30, 2))
    start = int(np.flatnonzero(np.diff(indptr) >= 2)[0])
    swapped = rows.copy()
    a = indptr[start]
    swapped[a], swapped[a + 1] = swapped[a + 1], swapped[a]
    assert "not strictly increasing" in " ".join(postings_faults(indptr, swapped, values, 30, 2))
    negative = values.copy()
    negative[0] = -1
    assert "≥ 0" in " ".join(postings_faults(indptr, rows, negative, 30, 2))
    assert "expected rows·k" in " ".join(postings_faults(indptr, rows, values, 31, 2))


def test_the_writer_streams_what_np_save_writes_whatever_the_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The files are np.save's bytes of the merged CSR, with the sha256 of what was written,
    for blocks smaller than one concept, of a few concepts, and of everything."""
    concepts, activations = random_codes(60, 3, 2)
    runs = [
        shard_postings(concepts[a:b], activations[a:b], a, CONCEPTS)
        for a, b in itertools.pairwise([0, 25, 26, 60])
    ]
    indptr, rows, values = csr_from_runs(runs, CONCEPTS)
    reference = tmp_path / "reference"
    reference.mkdir()
    for name, array in zip(
        (postings.INDPTR, postings.ROWS, postings.VALUES), (indptr, rows, values), strict=True
    ):
        if name == postings.ROWS:  # row ids in the narrowest type (bounded by the entries)
            array = array.astype(postings.row_dtype(len(rows)))
        np.save(reference / name, array)
    for block in (1, 7, 10_000):
        monkeypatch.setattr(postings_writer, "MERGE_BLOCK", block)
        folder = tmp_path / f"block-{block}"
        folder.mkdir()
        writer = PostingsWriter(folder, folder, CONCEPTS)
        for run in runs:
            writer.add(run)
        digests = writer.close()
        assert sorted(p.name for p in folder.iterdir()) == sorted(FILES)  # work files removed
        for name in FILES:
            assert (folder / name).read_bytes() == (reference / name).read_bytes(), (block, name)
            assert digests[folder / name] == sha256_file(folder / name)


def test_a_base_comes_first_in_every_concept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(postings_writer, "MERGE_BLOCK", 5)
    concepts, activations = random_codes(40, 2, 3)
    old = shard_postings(concepts[:30], activations[:30], 0, CONCEPTS)
    new = shard_postings(concepts[30:], activations[30:], 30, CONCEPTS)
    (tmp_path / "base").mkdir()
    writer = PostingsWriter(tmp_path / "base", tmp_path / "base", CONCEPTS)
    writer.add(old)
    writer.close()
    (tmp_path / "added").mkdir()
    writer = PostingsWriter(
        tmp_path / "added", tmp_path, CONCEPTS, base=Postings(tmp_path / "base")
    )
    writer.add(new)
    writer.close()
    merged = Postings(tmp_path / "added")
    indptr, rows, values = csr_from_runs([old, new], CONCEPTS)
    np.testing.assert_array_equal(merged.indptr, indptr)
    np.testing.assert_array_equal(merged.rows, rows)
    np.testing.assert_array_equal(merged.values, values)


def test_a_run_that_does_not_fit_is_refused(tmp_path: Path):
    concepts, activations = random_codes(5, 2, 4)
    run = shard_postings(concepts, activations, 0, CONCEPTS)
    writer = PostingsWriter(tmp_path, tmp_path, CONCEPTS + 1)
    with pytest.raises(ValueError, match="does not fit 11 concepts"):
        writer.add(run)


def test_concept_blocks_hold_at_most_a_block_or_one_concept():
    indptr = np.array([0, 3, 3, 10, 11, 12, 30, 30])
    assert concept_blocks(indptr, 5) == [(0, 2), (2, 3), (3, 5), (5, 6), (6, 7)]
    assert concept_blocks(indptr, 100) == [(0, 7)]
    assert concept_blocks(np.array([0]), 5) == []


def test_unsorted_rows_are_found_wherever_the_check_chunks_cut(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(postings, "CHECK_CHUNK", 4)
    concepts, activations = random_codes(30, 2, 1)
    indptr, rows, values = csr_from_runs(
        [shard_postings(concepts, activations, 0, CONCEPTS)], CONCEPTS
    )
    assert postings_faults(indptr, rows, values, 30, 2) == []
    for concept in range(CONCEPTS):
        for at in range(indptr[concept], indptr[concept + 1] - 1):
            swapped = rows.copy()
            swapped[at], swapped[at + 1] = swapped[at + 1], swapped[at]
            faults = postings_faults(indptr, swapped, values, 30, 2)
            assert faults == [f"{postings.ROWS}: rows not strictly increasing within a concept"]
