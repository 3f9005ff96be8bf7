"""A sparse code in words: its reconstruction, a phrase of its named concepts, and the score of
a description against captions. Pure functions (the service reads the bundle around them).

The code of a vector is its k active signed concepts with their activations a ≥ 0 (concept id
2j: +axis j, 2j + 1: −axis j; `training/cedar/sparse_codes.py`). Its reconstruction is

    x̂ = Uᵀ z̃ + b,   z̃_j = +a (id 2j) or −a (id 2j + 1) on the k active axes, 0 elsewhere,

CEDAR's own x̂ for that vector (`reconstruct`); the gallery captions nearest to x̂ describe the
code by example.

The phrase: the strongest named concept of each slot, composed in a caption's order —
"a {adjective} {subject} {verb}, {thing or place}" — a slot left out when no active concept
fills it (with no subject, the thing heads the noun phrase). Slots come from the name's word
class in the caption lexicon (`word_class`; a noun is a subject when it names a person, an
animal or a vehicle, else a thing or place — clothing included). Unnamed axes (a name that is
the axis label, or no content word) are skipped, and a word already used is not used again (one
name on two axes). One word per slot, and no clothing slot: on Flickr8k validation rows a
second thing, or "in a {clothing}", lowered the share of the phrase's words found in the
image's other captions.

The score of a description: the share of its distinct content words (lemmas by the lexicon)
that occur among the content words of reference captions — for a row of a gallery, that row's
image's other captions, never its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from training.core.lexicon.nouns import SUBJECT_NOUNS
from training.core.lexicon.words import article, word_class

SLOTS = {"adjective": 1, "subject": 1, "verb": 1, "setting": 1}


def code_reconstruction(
    rotation: np.ndarray, mean: np.ndarray, concepts: np.ndarray, activations: np.ndarray
) -> np.ndarray:
    """x̂ [N, D] float32 of codes given as concept ids [N, k] (−1: no concept) and activations
    [N, k] ≥ 0 (module docstring)."""
    u = np.asarray(rotation, dtype=np.float32)
    ids = np.atleast_2d(np.asarray(concepts, dtype=np.int64))
    values = np.atleast_2d(np.asarray(activations, dtype=np.float32))
    if ids.shape != values.shape:
        raise ValueError(f"concepts {ids.shape} and activations {values.shape} differ in shape")
    if (ids >= 2 * u.shape[0]).any():
        raise ValueError(f"concept ids must lie below {2 * u.shape[0]}")
    z = np.zeros((len(ids), u.shape[0]), dtype=np.float32)
    rows, slots = np.nonzero(ids >= 0)
    signed = np.where(ids[rows, slots] % 2, -1.0, 1.0) * values[rows, slots]
    np.add.at(z, (rows, ids[rows, slots] // 2), signed.astype(np.float32))
    return z @ u + np.asarray(mean, dtype=np.float32)


def name_slot(name: str) -> tuple[str, str] | None:
    """(word, slot) of a concept name, None for a name with no content word (an unnamed axis).
    A name of several words is classed by its last word and kept whole."""
    tokens = name.split()
    entry = word_class(tokens[-1]) if tokens else None
    if entry is None:
        return None
    lemma, kind = entry
    word = lemma if len(tokens) == 1 else name.strip().lower()
    if kind == "noun":
        kind = "subject" if tokens[-1].lower() in SUBJECT_NOUNS else "setting"
    return word, kind


def phrase_slots(names: Sequence[str]) -> dict[str, list[str]]:
    """Each slot's words, strongest first, from concept names given strongest first."""
    slots: dict[str, list[str]] = {slot: [] for slot in SLOTS}
    used: set[str] = set()
    for name in names:
        found = name_slot(name)
        if found is None or found[0] in used:
            continue
        word, slot = found
        if len(slots[slot]) < SLOTS[slot]:
            slots[slot].append(word)
            used.add(word)
    return slots


def compose_phrase(names: Sequence[str]) -> str:
    """The phrase of concept names given strongest first ("" when none is named)."""
    slots = phrase_slots(names)
    setting = list(slots["setting"])
    head = slots["subject"] or setting[:1]
    if not slots["subject"]:
        setting = setting[1:]
    noun_phrase = [*slots["adjective"], *head]
    parts = [article("a", noun_phrase[0]), *noun_phrase] if noun_phrase else []
    text = " ".join([*parts, *slots["verb"]])
    return ", ".join([p for p in (text, *setting) if p])


def content_words(texts: str | Iterable[str]) -> set[str]:
    """The distinct content-word lemmas of a text or of several (the lexicon's `word_class`)."""
    if isinstance(texts, str):
        texts = [texts]
    return {e[0] for text in texts for token in text.split() if (e := word_class(token))}


@dataclass(frozen=True)
class WordOverlap:
    """`found` of a description's `words` distinct content words occur in the references."""

    found: int
    words: int

    @property
    def share(self) -> float | None:
        return self.found / self.words if self.words else None


def word_overlap(description: str | Iterable[str], references: Iterable[str]) -> WordOverlap:
    """How many of a description's content words occur among the references' content words."""
    words = content_words(description)
    return WordOverlap(len(words & content_words(references)), len(words))


def frequent_words(texts: Iterable[str], n: int) -> list[str]:
    """The n most frequent content-word lemmas of a corpus (ties in first-seen order)."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(e[0] for token in text.split() if (e := word_class(token)))
    return [word for word, _ in counts.most_common(n)]
