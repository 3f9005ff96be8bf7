"""The build's CEDAR codes (indexer/format/codes.py): the postings run straight from the embeddings
is the run of ConceptCoder.encode's codes — ties at the top-k threshold included."""

from __future__ import annotations

import numpy as np
import pytest

from indexer.format.codes import check_codable, code_run, concept_dtype, top_k_mask
from indexer.format.postings import PostingRun, shard_postings
from training.cedar.concepts import ConceptCoder
from training.core.artifacts import TransformArtifact
from training.core.errors import InputError
from training.synthetic import random_cedar_artifact

DIM = 32


def coder_with_k(k: int, exact: bool = False) -> ConceptCoder:
    """A CEDAR coder with a random rotation; `exact`: a signed permutation and no mean instead,
    so that z = U(x − b) is computed without rounding and ties in x stay ties in z."""
    sample = np.random.default_rng(7).normal(size=(200, DIM)).astype(np.float32)
    sample /= np.linalg.norm(sample, axis=1, keepdims=True)
    artifact = random_cedar_artifact(DIM, k, sample, seed=3)
    if exact:
        rng = np.random.default_rng(5)
        rotation = np.eye(DIM, dtype=np.float32)[rng.permutation(DIM)]
        rotation *= rng.choice([-1.0, 1.0], size=(DIM, 1)).astype(np.float32)
        artifact = TransformArtifact(
            "cedar", rotation, np.zeros(DIM), artifact.contract, extra=artifact.extra
        )
    return ConceptCoder(artifact)


def tied_rows(artifact: TransformArtifact, k: int) -> np.ndarray:
    """Rows x whose codes z = U(x − b) tie at the k-th largest |value| (exactly, for an exact
    coder): all zero, all magnitudes equal, and k − 1 clear winners followed by three equal
    runners-up of mixed sign."""
    level = np.full(DIM, 0.125, dtype=np.float32)
    level[::3] *= -1
    partial = np.linspace(0.01, 0.02, DIM).astype(np.float32)
    partial[: k - 1] = np.linspace(0.5, 0.9, k - 1)
    partial[k - 1 : k + 2] = [0.25, -0.25, 0.25]
    codes = np.stack([np.zeros(DIM, np.float32), level, partial])
    return codes @ artifact.rotation + artifact.mean


def reference_run(coder: ConceptCoder, x: np.ndarray, first_row: int, batch: int) -> PostingRun:
    """The run of coder.encode's codes, encoding the same blocks (BLAS may round a product
    differently in the last bit for another number of rows)."""
    codes = [coder.encode(x[start : start + batch]) for start in range(0, len(x), batch)]
    concepts, activations = (np.concatenate(part) for part in zip(*codes, strict=True))
    return shard_postings(concepts, activations, first_row, 2 * DIM)


@pytest.mark.parametrize("exact", [False, True], ids=["rotation", "exact"])
@pytest.mark.parametrize("k", [1, 4, DIM])
@pytest.mark.parametrize("batch", [5, 8192])
def test_the_run_is_that_of_the_coders_codes(k: int, batch: int, exact: bool):
    coder = coder_with_k(k, exact)
    artifact = coder.artifact
    x = np.random.default_rng(k).normal(size=(40, DIM)).astype(np.float32)
    x = np.concatenate([x, tied_rows(artifact, min(max(k, 2), DIM - 2)), x[:3]])
    run = code_run(x, artifact.rotation, artifact.mean, k, 1000, batch=batch)
    expected = reference_run(coder, x, 1000, batch)
    np.testing.assert_array_equal(run.counts, expected.counts)
    np.testing.assert_array_equal(run.rows, expected.rows)
    np.testing.assert_array_equal(run.values, expected.values)
    assert run.rows.dtype == np.int64 and run.values.dtype == np.float32
    assert run.counts.sum() == len(x) * k and run.rows.min() == 1000


def test_ties_at_the_threshold_take_the_coders_choice():
    coder = coder_with_k(4, exact=True)
    artifact = coder.artifact
    x = tied_rows(artifact, 4)
    magnitudes = np.abs((x - artifact.mean) @ artifact.rotation.T)
    threshold = np.sort(magnitudes, axis=1)[:, -4]
    assert ((magnitudes >= threshold[:, None]).sum(axis=1) > 4).all()  # each row ties
    mask = top_k_mask(magnitudes, 4)
    assert (mask.sum(axis=1) == 4).all()
    concepts, _ = coder.encode(x)
    for row in range(len(x)):
        assert set(np.flatnonzero(mask[row])) == set((concepts[row] // 2).tolist())


def test_the_mask_keeps_the_k_largest():
    magnitudes = np.abs(np.random.default_rng(1).normal(size=(50, DIM))).astype(np.float32)
    mask = top_k_mask(magnitudes, 6)
    expected = np.zeros_like(mask)
    np.put_along_axis(expected, np.argsort(-magnitudes, axis=1)[:, :6], True, axis=1)
    np.testing.assert_array_equal(mask, expected)
    assert top_k_mask(np.zeros((0, DIM), np.float32), 6).shape == (0, DIM)
    with pytest.raises(ValueError, match="k must be between 1 and the dimension"):
        top_k_mask(magnitudes, DIM + 1)


def test_an_empty_block_and_the_id_type():
    coder = coder_with_k(4)
    run = code_run(
        np.zeros((0, DIM), np.float32), coder.artifact.rotation, coder.artifact.mean, 4, 0
    )
    assert run.counts.shape == (2 * DIM,) and run.counts.sum() == 0 and len(run.rows) == 0
    assert concept_dtype(2 * 512) == np.int16 and concept_dtype(2 * 20_000) == np.int32


def test_rows_are_refused_as_the_coder_refuses_them():
    x = np.ones((3, DIM), np.float32)
    x[1, 2] = np.nan
    with pytest.raises(InputError, match="embeddings hold NaN or Inf"):
        check_codable(x, DIM)
    with pytest.raises(InputError, match=r"expected embeddings of shape \[N, 16\]"):
        check_codable(x, 16)
