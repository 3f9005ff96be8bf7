"""Concept postings: the transpose of the [N, k] code table, as CSR, built from shard runs, and
stored compact (uint16 row lows, a chunk table per 65,536 rows, float16 activations); the older
CSR (absolute row ids, float32 activations, no chunk table) still reads."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from indexer.format import postings, postings_writer
from indexer.format.postings import (
    CHUNK_ROWS,
    CHUNKS,
    FILES,
    INDPTR,
    ROWS,
    VALUES,
    PostingRun,
    Postings,
    chunk_count,
    csr_from_runs,
    entries_of_rows,
    postings_faults,
    shard_postings,
)
from indexer.format.postings_writer import PostingsWriter, concept_blocks, filter_postings
from training.core.files import sha256_file

CONCEPTS = 10


def random_codes(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    concepts = np.stack([rng.choice(CONCEPTS, k, replace=False) for _ in range(n)])
    return concepts, rng.random((n, k)).astype(np.float32)


def brute_force(concepts: np.ndarray, activations: np.ndarray, concept: int):
    rows, cols = np.nonzero(concepts == concept)
    return rows, activations[rows, cols]


def as_stored(values: np.ndarray) -> np.ndarray:
    """Activations as the compact format gives them back: rounded to float16."""
    return np.asarray(values, dtype=np.float32).astype(np.float16).astype(np.float32)


def reference_chunks(indptr: np.ndarray, rows: np.ndarray, n_rows: int) -> np.ndarray:
    """The chunk table by its definition: where each concept's rows ≥ h·65,536 begin."""
    bounds = np.arange(chunk_count(n_rows) + 1, dtype=np.int64) * CHUNK_ROWS
    bounds[-1] = np.iinfo(np.int64).max  # the last chunk ends with the concept
    return np.stack(
        [
            indptr[c] + np.searchsorted(rows[indptr[c] : indptr[c + 1]], bounds)
            for c in range(len(indptr) - 1)
        ]
    ).astype(np.int64)


def write_postings(folder: Path, runs: list[PostingRun], rows: int | None = None) -> Postings:
    folder.mkdir(parents=True, exist_ok=True)
    writer = PostingsWriter(folder, folder, CONCEPTS, rows=rows)
    for run in runs:
        writer.add(run)
    writer.close()
    return Postings(folder)


def write_old_format(folder: Path, indptr: np.ndarray, rows: np.ndarray, values: np.ndarray):
    """The CSR as bundles wrote it before the chunk table: int32 ids, float32 activations."""
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / INDPTR, indptr.astype(np.int64))
    np.save(folder / ROWS, rows.astype(np.int32))
    np.save(folder / VALUES, values.astype(np.float32))


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
        assert got_rows.dtype == np.int64 and got_values.dtype == np.float32
        np.testing.assert_array_equal(got_rows, expected_rows)
        np.testing.assert_array_equal(on_disk.rows_of(concept), expected_rows)  # a filter's read
        np.testing.assert_array_equal(got_values, as_stored(expected_values))
    with pytest.raises(IndexError, match="outside"):
        on_disk.rows_of(CONCEPTS)
    assert postings_faults(indptr, rows, values, 50, 3) == []
    stored = (on_disk.stored_rows, on_disk.stored_values)
    assert postings_faults(on_disk.indptr, *stored, 50, 3, chunks=on_disk.chunks) == []
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
    np.save(reference / INDPTR, indptr)
    np.save(reference / ROWS, (rows & 0xFFFF).astype(np.uint16))
    np.save(reference / CHUNKS, reference_chunks(indptr, rows, len(rows)))  # rows: entries
    np.save(reference / VALUES, values.astype(np.float16))
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
    np.testing.assert_array_equal(merged.values, as_stored(values))


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


def test_chunk_count_is_at_least_one_and_covers_every_row():
    assert [chunk_count(n) for n in (0, 1, CHUNK_ROWS, CHUNK_ROWS + 1, 200_000)] == [1, 1, 1, 2, 4]


@pytest.fixture(scope="module")
def spanning() -> tuple[np.ndarray, np.ndarray]:
    """200,000 rows (4 chunks of 65,536) × k = 2 of CONCEPTS concepts, a few very sparse."""
    rng = np.random.default_rng(7)
    n = 200_000
    weights = np.array([40, 20, 10, 10, 8, 5, 4, 2, 0.5, 0.5])
    first = rng.choice(CONCEPTS, n, p=weights / weights.sum())
    second = (first + 1 + rng.integers(0, CONCEPTS - 1, n)) % CONCEPTS
    concepts = np.stack([first, second], axis=1)
    activations = rng.gamma(2.0, 0.5, (n, 2)).astype(np.float32)
    activations[::997, 0] = rng.random(len(activations[::997])) * 1e-6  # float16 subnormals
    return concepts, activations


def test_postings_spanning_several_chunks_round_trip(
    spanning, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Written block by block (blocks smaller than a concept, runs cut inside chunks), the
    compact postings give back csr_from_runs' rows exactly and its values to float16, their
    chunk table is the definition's, and verification (in check chunks that cut concepts and
    65,536-row chunks) finds nothing."""
    monkeypatch.setattr(postings_writer, "MERGE_BLOCK", 30_011)
    monkeypatch.setattr(postings, "CHECK_CHUNK", 40_009)
    concepts, activations = spanning
    n = len(concepts)
    cuts = [0, 1, 65_535, 70_000, 131_073, n]
    runs = [
        shard_postings(concepts[a:b], activations[a:b], a, CONCEPTS)
        for a, b in itertools.pairwise(cuts)
    ]
    indptr, rows, values = csr_from_runs(runs, CONCEPTS)
    stored = write_postings(tmp_path / "v", runs, rows=n)
    assert stored.stored_rows.dtype == np.uint16 and stored.stored_values.dtype == np.float16
    assert stored.chunks.shape == (CONCEPTS, 5)
    np.testing.assert_array_equal(stored.indptr, indptr)
    np.testing.assert_array_equal(stored.chunks, reference_chunks(indptr, rows, n))
    np.testing.assert_array_equal(stored.rows[:], rows)
    np.testing.assert_array_equal(stored.values[:], as_stored(values))
    assert np.abs(stored.values[:] - values).max() <= 2.0**-11 * values.max()
    for concept in range(CONCEPTS):
        a, b = indptr[concept], indptr[concept + 1]
        got_rows, got_values = stored.get(concept)
        np.testing.assert_array_equal(stored.rows_of(concept), rows[a:b])
        lows = stored.stored_rows[a:b]
        by_formula = np.repeat(np.arange(4) << 16, np.diff(stored.chunks[concept])) + lows
        np.testing.assert_array_equal(got_rows, rows[a:b])
        np.testing.assert_array_equal(by_formula, rows[a:b])
        np.testing.assert_array_equal(got_values, as_stored(values[a:b]))
    for a, b in [(0, 0), (65_530, 65_545), (123_456, 345_678), (len(rows) - 3, len(rows))]:
        np.testing.assert_array_equal(stored.rows[a:b], rows[a:b])  # ranges across concepts
    wanted = np.array([0, 65_535, 65_536, 131_072, n - 1])
    found = entries_of_rows(stored.indptr, stored.rows, stored.values, 6, wanted)
    expected = entries_of_rows(indptr, rows, as_stored(values), 6, wanted)
    for ours, theirs in zip(found, expected, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    held = (stored.stored_rows, stored.stored_values)
    assert postings_faults(stored.indptr, *held, n, 2, chunks=stored.chunks) == []
    assert (tmp_path / "v" / ROWS).stat().st_size == 128 + 2 * len(rows)  # 2 B a row id
    assert (tmp_path / "v" / VALUES).stat().st_size == 128 + 2 * len(rows)  # 2 B a value


def test_an_add_and_a_delete_across_chunks_are_the_merge_of_their_rows(
    spanning, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(postings_writer, "MERGE_BLOCK", 50_000)
    concepts, activations = spanning
    n, old_rows = len(concepts), 100_000
    old = shard_postings(concepts[:old_rows], activations[:old_rows], 0, CONCEPTS)
    new = shard_postings(concepts[old_rows:], activations[old_rows:], old_rows, CONCEPTS)
    base = write_postings(tmp_path / "base", [old], rows=old_rows)
    (tmp_path / "added").mkdir()
    writer = PostingsWriter(tmp_path / "added", tmp_path, CONCEPTS, base=base, rows=n)
    writer.add(new)
    writer.close()
    added = Postings(tmp_path / "added")
    indptr, rows, values = csr_from_runs([old, new], CONCEPTS)
    np.testing.assert_array_equal(added.indptr, indptr)
    np.testing.assert_array_equal(added.rows[:], rows)
    np.testing.assert_array_equal(added.values[:], as_stored(values))
    np.testing.assert_array_equal(added.chunks, reference_chunks(indptr, rows, n))

    keep = np.ones(n, dtype=bool)
    keep[np.random.default_rng(1).choice(n, 60_000, replace=False)] = False
    keep[:70_000] = False  # the first chunk and a half gone: every row moves down a chunk
    new_row = np.where(keep, np.cumsum(keep) - 1, -1)
    (tmp_path / "deleted").mkdir()
    filter_postings(added, new_row, tmp_path / "deleted")
    deleted = Postings(tmp_path / "deleted")
    kept = np.flatnonzero(keep)
    expected = csr_from_runs(
        [shard_postings(concepts[kept], activations[kept], 0, CONCEPTS)], CONCEPTS
    )
    assert sorted(p.name for p in (tmp_path / "deleted").iterdir()) == sorted(FILES)
    np.testing.assert_array_equal(deleted.indptr, expected[0])
    np.testing.assert_array_equal(deleted.rows[:], expected[1])
    np.testing.assert_array_equal(deleted.values[:], as_stored(expected[2]))
    np.testing.assert_array_equal(
        deleted.chunks, reference_chunks(expected[0], expected[1], len(kept))
    )
    held = (deleted.stored_rows, deleted.stored_values)
    assert postings_faults(deleted.indptr, *held, len(kept), 2, chunks=deleted.chunks) == []


def test_the_older_format_still_reads_and_is_written_compact(tmp_path: Path):
    """An old CSR (int32 ids, float32 activations, no chunk file) reads through `Postings` as
    before, verifies, and an add or a delete on it writes the compact format."""
    concepts, activations = random_codes(60, 3, 5)
    run = shard_postings(concepts, activations, 0, CONCEPTS)
    indptr, rows, values = csr_from_runs([run], CONCEPTS)
    write_old_format(tmp_path / "old", indptr, rows, values)
    old = Postings(tmp_path / "old")
    assert old.chunks is None and old.files == (INDPTR, ROWS, VALUES)
    for concept in range(CONCEPTS):
        expected_rows, expected_values = brute_force(concepts, activations, concept)
        got_rows, got_values = old.get(concept)
        assert got_rows.dtype == np.int64 and got_values.dtype == np.float32
        np.testing.assert_array_equal(got_rows, expected_rows)
        np.testing.assert_array_equal(old.rows_of(concept), expected_rows)
        np.testing.assert_array_equal(got_values, expected_values)  # float32, not rounded
    np.testing.assert_array_equal(old.rows[10:100], rows[10:100])
    assert postings_faults(old.indptr, old.stored_rows, old.stored_values, 60, 3) == []

    (tmp_path / "added").mkdir()
    writer = PostingsWriter(tmp_path / "added", tmp_path, CONCEPTS, base=old, rows=60)
    writer.close()  # nothing added: the old postings, rewritten compact
    (tmp_path / "deleted").mkdir()
    filter_postings(old, np.arange(60), tmp_path / "deleted")  # nothing deleted
    for folder in ("added", "deleted"):
        compact = Postings(tmp_path / folder)
        assert compact.files == FILES and compact.stored_rows.dtype == np.uint16
        np.testing.assert_array_equal(compact.rows[:], rows)
        np.testing.assert_array_equal(compact.values[:], as_stored(values))


def test_verification_finds_a_chunk_table_that_disagrees(spanning, tmp_path: Path):
    concepts, activations = spanning
    n = len(concepts)
    stored = write_postings(tmp_path, [shard_postings(concepts, activations, 0, CONCEPTS)], n)
    indptr, lows, values, chunks = (
        stored.indptr,
        np.array(stored.stored_rows),
        stored.stored_values,
        stored.chunks,
    )

    def faults(table=chunks, rows=lows, n_rows=n) -> str:
        return " | ".join(postings_faults(indptr, rows, values, n_rows, 2, chunks=table))

    assert faults() == ""
    shifted = chunks.copy()
    shifted[3, -1] -= 1  # concept 3 ends an entry early
    assert faults(shifted) == (
        f"{CHUNKS}: concept 3 spans entries {chunks[3, 0]} .. {chunks[3, -1] - 1}, {INDPTR} "
        f"says {indptr[3]} .. {indptr[4]}"
    )
    crossed = chunks.copy()
    crossed[2, 2] = crossed[2, 3] + 1  # a chunk's range ends before it begins
    assert faults(crossed) == f"{CHUNKS}: concept 2's chunk offsets are not monotone"
    moved = chunks.copy()
    moved[5, 1:4] = moved[5, 2:5]  # the same counts, every range one chunk early: unsorted
    assert faults(moved) == f"{ROWS}: rows not strictly increasing within a concept"
    assert faults(chunks[:, :-1]) == (
        f"{CHUNKS}: int64 [10, 4], expected int64 [concepts, ⌈rows / 65,536⌉ + 1] = [10, 5]"
    )
    assert "⌈rows / 65,536⌉ + 1] = [10, 3]" in faults(n_rows=CHUNK_ROWS * 2)  # rows dropped
    beyond = lows.copy()
    last = int(chunks[0, -1]) - 1  # concept 0's last row, in the last chunk
    beyond[last] = np.uint16(n - 3 * CHUNK_ROWS + 5)
    assert faults(rows=beyond) == f"{ROWS}: row ids outside [0, {n})"
    assert faults(rows=lows.astype(np.int32)) == (
        f"{ROWS}: int32 beside {CHUNKS}, expected the uint16 low bits"
    )
    assert postings_faults(indptr, lows, values, n, 2) == [
        f"{ROWS}: uint16 row ids without {CHUNKS}"
    ]


@pytest.mark.parametrize("compact", [True, False])
def test_a_rows_entries_are_found_alike_by_search_and_by_scan(
    spanning, tmp_path: Path, compact: bool
):
    """Postings.entries_of_rows: a few rows (binary searches in each concept's range of their
    chunk, or of the whole concept in the older format) and many (one pass over the entries)
    give the entries the brute-force transpose has, in concept order, over any concept range;
    a row asked twice is found once."""
    concepts, activations = spanning
    n = len(concepts)
    run = shard_postings(concepts, activations, 0, CONCEPTS)
    indptr, rows, values = csr_from_runs([run], CONCEPTS)
    if compact:
        stored = write_postings(tmp_path / "v", [run], rows=n)
    else:
        write_old_format(tmp_path / "v", indptr, rows, values)
        stored = Postings(tmp_path / "v")
    few = np.array([n - 1, 0, 65_535, 65_536, 131_072, 7, 7])
    many = np.random.default_rng(3).choice(n, 60_000, replace=False)
    for wanted, first, stop in [(few, 0, CONCEPTS), (few, 3, 8), (many, 0, CONCEPTS)]:
        found_rows, found_concepts, found_values = stored.entries_of_rows(wanted, first, stop)
        expected_rows, expected_concepts, expected_values = [], [], []
        for concept in range(first, stop):
            concept_rows, concept_values = brute_force(concepts, activations, concept)
            keep = np.isin(concept_rows, wanted)
            expected_rows += concept_rows[keep].tolist()
            expected_concepts += [concept] * int(keep.sum())
            expected_values += concept_values[keep].tolist()
        assert found_rows.tolist() == expected_rows
        assert found_concepts.tolist() == expected_concepts
        expected_values = np.array(expected_values, np.float32)
        kept = as_stored(expected_values) if compact else expected_values
        np.testing.assert_array_equal(found_values, kept)
