"""A sparse code in words: the reconstruction, the phrase and the word-overlap score."""

from __future__ import annotations

import numpy as np
import pytest

from training.cedar.descriptions import (
    code_reconstruction,
    compose_phrase,
    content_words,
    frequent_words,
    name_slot,
    word_overlap,
)
from training.cedar.sparse_codes import concept_ids, reconstruct, sparse_codes
from training.core.rotations import random_rotation


def test_the_reconstruction_of_a_code_is_cedars_own():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 16)).astype(np.float32)
    u, b = random_rotation(16, 1), rng.normal(size=16).astype(np.float32)
    axes, values = sparse_codes(x, u, b, 5)
    ids, activations = concept_ids(axes, values), np.abs(values)
    assert np.allclose(
        code_reconstruction(u, b, ids, activations), reconstruct(x, u, b, 5), atol=1e-5
    )
    # every axis kept: the vector itself; padding (−1) adds nothing
    axes, values = sparse_codes(x, u, b, 16)
    full = code_reconstruction(u, b, concept_ids(axes, values), np.abs(values))
    assert np.allclose(full, x, atol=1e-4)
    padded = np.concatenate([concept_ids(axes, values), -np.ones((20, 2), np.int64)], axis=1)
    zeros = np.concatenate([np.abs(values), np.full((20, 2), 9.0, np.float32)], axis=1)
    assert np.allclose(code_reconstruction(u, b, padded, zeros), full, atol=1e-6)
    with pytest.raises(ValueError, match="below 32"):
        code_reconstruction(u, b, np.array([[32]]), np.array([[1.0]]))


def test_names_fill_slots_by_word_class():
    assert name_slot("dogs") == ("dog", "subject")
    assert name_slot("black") == ("black", "adjective")
    assert name_slot("running") == ("running", "verb")
    assert name_slot("shirt") == ("shirt", "setting")
    assert name_slot("beach") == ("beach", "setting")
    assert name_slot("+12") is None and name_slot("") is None and name_slot("the") is None


def test_the_phrase_takes_the_strongest_named_concept_of_each_slot():
    names = ["+3", "running", "dogs", "black", "grass", "dog", "white", "jumping", "beach"]
    # "+3" is an unnamed axis; "dog" repeats "dogs"; "white", "jumping" and "beach" lose to
    # the stronger word of their slot
    assert compose_phrase(names) == "a black dog running, grass"
    assert compose_phrase(["grass", "orange", "beach"]) == "an orange grass"  # no subject
    assert compose_phrase(["jumping", "+2"]) == "jumping"
    assert compose_phrase(["+1", "-4"]) == ""


def test_word_overlap_counts_distinct_content_words_of_the_description():
    references = ["A black dog runs on the grass .", "Two dogs play in a field"]
    assert content_words(references) == {"black", "dog", "runs", "grass", "play", "field"}
    overlap = word_overlap("a black dog running, grass, beach", references)
    assert (overlap.found, overlap.words) == (3, 5)  # black, dog, grass of 5
    assert overlap.share == pytest.approx(0.6)
    assert word_overlap("the of", references).share is None
    assert frequent_words(["a dog", "the dog runs", "a cat"], 2) == ["dog", "runs"]
