"""CoSAE's data pairs: the synthetic generator, the split, the real pairs on a few captions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from training.core.errors import InputError
from training.cosae.pairs import (
    EmbeddingPair,
    flickr8k_captions,
    layer_pair,
    load_pair,
    minilm_layer_embeddings,
    save_pair,
    split_pair,
    synthetic_pair,
    tfidf_pair,
    tfidf_svd_embeddings,
)

CAPTIONS = [
    "a black dog runs across the grass",
    "a brown dog runs on the green grass",
    "two children play football in a park",
    "children are playing soccer in the park",
    "a man rides a red bicycle down the street",
    "a cyclist on a red bike in the city street",
]


def test_synthetic_pair_is_seeded_sparse_and_shares_only_its_shared_factors():
    pair = synthetic_pair(rows=500, shared=6, private=3, dim_i=10, dim_j=14, seed=1)
    again = synthetic_pair(rows=500, shared=6, private=3, dim_i=10, dim_j=14, seed=1)
    np.testing.assert_array_equal(pair.x_i, again.x_i)
    assert pair.x_i.shape == (500, 10) and pair.x_j.shape == (500, 14)
    assert pair.shared_factors.shape == (500, 6)
    assert 0.1 < (pair.shared_factors > 0).mean() < 0.2  # density 0.15
    other = synthetic_pair(rows=500, shared=6, private=3, dim_i=10, dim_j=14, seed=2)
    assert not np.allclose(pair.x_i, other.x_i)
    # both domains carry the shared factors: a linear read-out of them works in each
    for x in (pair.x_i, pair.x_j):
        design = np.hstack([x, np.ones((500, 1))])
        fit = design @ np.linalg.lstsq(design, pair.shared_factors, rcond=None)[0]
        assert np.corrcoef(fit.ravel(), pair.shared_factors.ravel())[0, 1] > 0.8


def test_split_keeps_groups_together_and_nests_the_paired_subsets():
    groups = np.repeat(np.arange(200), 5)  # five captions per image
    pair = EmbeddingPair(
        "p", np.zeros((1000, 2), np.float32), np.zeros((1000, 3), np.float32), "a", "b", groups
    )
    split = split_pair(pair, seed=0)
    parts = [set(split.train), set(split.val), set(split.test)]
    assert sum(map(len, parts)) == 1000 and not (parts[0] & parts[1] or parts[1] & parts[2])
    for rows in (split.train, split.val, split.test):
        others = np.setdiff1d(np.arange(1000), rows)
        assert not set(groups[rows]) & set(groups[others])
    n = len(split.train)
    assert split.pair_count(0.001) == max(1, int(np.ceil(0.001 * n)))
    assert split.pair_count(1.0) == n
    small, large = split.paired_rows(0.01), split.paired_rows(0.1)
    np.testing.assert_array_equal(large[: len(small)], small)
    for bad in (0.0, -0.1, 1.01, float("nan")):
        with pytest.raises(InputError, match=r"\(0, 1\]"):
            split.pair_count(bad)


def test_tfidf_svd_puts_captions_sharing_words_together():
    x = tfidf_svd_embeddings(CAPTIONS, dim=4)
    assert x.shape == (6, 4)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    similarity = x @ x.T
    assert similarity[0, 1] > similarity[0, 2] and similarity[4, 5] > similarity[4, 0]
    with pytest.raises(InputError, match="needs more than"):
        tfidf_svd_embeddings(CAPTIONS, dim=6)


def test_a_pair_file_round_trips_and_a_stranger_file_is_refused(tmp_path: Path):
    pair = synthetic_pair(rows=50, seed=0)
    save_pair(tmp_path / "pair.npz", pair)
    loaded = load_pair(tmp_path / "pair.npz")
    np.testing.assert_array_equal(loaded.x_j, pair.x_j)
    np.testing.assert_array_equal(loaded.shared_factors, pair.shared_factors)
    assert (loaded.name, loaded.name_i, loaded.name_j) == (pair.name, pair.name_i, pair.name_j)
    np.savez(tmp_path / "other.npz", something=np.zeros(3))
    with pytest.raises(InputError, match="not a CoSAE pair file"):
        load_pair(tmp_path / "other.npz")


def test_flickr8k_captions_reads_captions_and_their_images(tmp_path: Path):
    (tmp_path / "Flickr8k.token.txt").write_text(
        "a.jpg#0\tA dog runs .\na.jpg#1\tA dog is running .\nb.jpg#0\tTwo kids play .\n"
    )
    captions, images = flickr8k_captions(tmp_path)
    assert captions == ["A dog runs .", "A dog is running .", "Two kids play ."]
    assert images == ["a.jpg", "a.jpg", "b.jpg"]
    assert flickr8k_captions(tmp_path, limit=1)[0] == ["A dog runs ."]


@pytest.mark.slow
def test_minilm_pairs_on_a_handful_of_captions(minilm):
    sentence, hidden = minilm_layer_embeddings(CAPTIONS, minilm.model, layer=3, batch_size=4)
    np.testing.assert_allclose(sentence, minilm.encode_text(CAPTIONS), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(hidden, axis=1), 1.0, atol=1e-5)
    assert np.abs(hidden - sentence).max() > 0.05  # an intermediate layer is not the output
    output, last_layer = minilm_layer_embeddings(CAPTIONS, minilm.model, layer=6)
    np.testing.assert_allclose(last_layer, output, atol=1e-5)  # layer 6 of 6 is the output
    with pytest.raises(InputError, match="layer"):
        minilm_layer_embeddings(CAPTIONS, minilm.model, layer=7)

    layered = layer_pair(CAPTIONS, minilm.model, layer=2, groups=list("aabbcc"))
    assert layered.x_i.shape == (6, 384) and layered.x_j.shape == (6, 384)
    assert layered.name_j == "minilm-layer2"
    words = tfidf_pair(CAPTIONS, minilm, dim=3)
    assert words.x_i.shape == (6, 384) and words.x_j.shape == (6, 3)
    np.testing.assert_allclose(words.x_i, sentence, atol=1e-5)
