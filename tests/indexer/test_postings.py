"""Concept postings: the transpose of the [N, k] code table, as CSR, built from shard runs."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from indexer.postings import (
    Postings,
    PostingsWriter,
    csr_from_runs,
    postings_faults,
    shard_postings,
)

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
