"""Reading CEDAR's concepts back: the coder, and what of a code a reader is shown.

The coder: embeddings → the k active concepts (signed ids and activation) → names, from an
artifact's catalog (training.cedar.catalog); an unnamed concept is found by its label only.

Word concepts. An artifact with a vocabulary readout (training.cedar.readout) also has one
concept per word w of it, id 2D + w, active on a row where its margin is ≥ 0; its catalog entry
is the word (label and name), with the word's held-out precision. A name resolves to its word
concept where there is one, else to the axes so named; labels and ids resolve as before.

What is shown (`ConceptCoder.shown`): the concepts whose held-out precision reaches the floor
(`display_floor`, picked on dev by training/cedar/floor.py), one entry per name
(`merged_by_name`), an axis named like a learnt word only where that word is active
(`axis_words`). On a bundle's gallery (`ConceptCoder.on_gallery`) each concept is also held to
its agreement there (training/cedar/gallery_trust.py): a learnt word or an axis whose agreement
falls below AGREEMENT is not shown, nor one whose agreement shifted from its reference on the
training corpus (the artifact's REFERENCE tensor against the gallery's counts: `shifted`; a
phrase, stricter, says one only where it fell less: `sayable`), and
a zero-shot word (no held-out precision; its entries already won their neighbourhood,
indexer/vocabulary/word_gate.py) is shown where its agreement reaches ZERO_SHOT_AGREEMENT.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from training.cedar.catalog import CatalogEntry, catalog_entry, word_entry
from training.cedar.gallery_trust import (
    AGREEMENT,
    DESCRIBED_SHIFT_RATIO,
    ZERO_SHOT_AGREEMENT,
    shifted,
)
from training.cedar.near_misses import suggestion
from training.cedar.readout.artifact import readout_of
from training.cedar.readout.vocabulary import VocabularyReadout, margins, readout_input
from training.cedar.sparse_codes import (
    check_k,
    concept_ids,
    parse_concept_label,
    sparse_codes,
)
from training.core.artifacts import TransformArtifact
from training.core.errors import InputError

REFERENCE = "reference_agreement"  # the artifact's tensor (training/cedar/reference_agreement.py)

# The held-out precision a concept needs to be shown (explanations, a hit's concepts, the
# catalog's listing) when its artifact records no floor picked on dev (training/cedar/floor.py)
DEFAULT_FLOOR = 0.3


@dataclass
class ActiveConcept:
    concept: int
    label: str
    name: str
    activation: float


class ConceptCoder:
    """A CEDAR artifact's encoding API: embeddings → k active signed concepts → names."""

    def __init__(self, artifact: TransformArtifact) -> None:
        if artifact.method != "cedar":
            raise InputError(f"a concept coder needs a CEDAR artifact, got {artifact.method!r}")
        catalog = artifact.extra.get("catalog")
        if not isinstance(catalog, list) or len(catalog) != 2 * artifact.dim:
            raise InputError(
                f"CEDAR artifact lacks a complete concept catalog ({2 * artifact.dim} entries)"
            )
        self.artifact = artifact
        self.k = check_k(int(artifact.extra.get("k", 0)), artifact.dim)
        self.readout: VocabularyReadout | None = readout_of(
            artifact.extra.get("readout"), artifact.tensors
        )
        self.catalog = [catalog_entry(e) for e in catalog]
        self._by_name: dict[str, list[int]] = {}
        for entry in self.catalog:
            if not entry.named:  # an unnamed concept is found by its label only
                continue
            self._by_name.setdefault(entry.name.lower(), []).append(entry.concept)
        if self.readout is not None:
            if self.readout.weight.shape[1] != artifact.dim:
                raise InputError(
                    f"the vocabulary readout is {self.readout.weight.shape[1]}-d, "
                    f"the rotation {artifact.dim}-d"
                )
            first = 2 * artifact.dim
            record = artifact.extra["readout"]["words"]
            self.catalog += [word_entry(first + w, r) for w, r in enumerate(record)]
            for w, word in enumerate(self.readout.words):  # a word's name is its word concept
                self._by_name[word.lower()] = [first + w]
        self._axis_word = axis_words(self.catalog, self.axis_concepts, self.readout)
        self.floor = display_floor(artifact.extra.get("floor"), self.catalog)
        self.agreement: np.ndarray | None = None  # on a gallery: each concept's (on_gallery)
        self.shifted: np.ndarray | None = None  # on a gallery: bool, moved from its reference
        self._unsaid: np.ndarray | None = None  # on a gallery: bool, moved too far for a phrase
        # on a gallery with a reference: float [concepts, 2], each concept's agreement share there
        # and on its training corpus (the shift rule's; NaN where no row was active)
        self.shares: np.ndarray | None = None
        self._holds = self._shown_mask()

    @property
    def axis_concepts(self) -> int:
        """2D: the signed axes, ids 0 .. 2D − 1; word concepts follow."""
        return 2 * self.artifact.dim

    @property
    def concepts(self) -> int:
        """Every concept id: the 2D signed axes, then one per readout word."""
        return len(self.catalog)

    def at_floor(self, floor: float | None) -> ConceptCoder:
        """The same coder showing the concepts that hold at another floor (None: every one)."""
        other = copy.copy(self)
        other.floor = floor
        other._holds = other._shown_mask()
        return other

    def on_gallery(
        self, agreement: np.ndarray | None, counts: np.ndarray | None = None
    ) -> ConceptCoder:
        """The same coder showing what holds on a gallery where each concept's agreement is
        `agreement` [concepts] (module doc; NaN: not measured there) and its counts `counts`
        [concepts, 2] (won, active: the shift rule's, against the artifact's reference where
        it keeps one; None: no shift read); `agreement` None: the artifact's rule alone."""
        for what, given in (("agreement", agreement), ("agreement counts", counts)):
            if given is not None and len(given) != self.concepts:
                raise InputError(
                    f"gallery {what} for {len(given)} concepts, the catalog has {self.concepts}"
                )
        other = copy.copy(self)
        other.agreement = None if agreement is None else np.asarray(agreement, dtype=np.float32)
        reference = self.artifact.tensors.get(REFERENCE)
        other.shifted = other._unsaid = None
        other.shares = None
        if agreement is not None and counts is not None and reference is not None:
            if np.shape(reference) != (self.concepts, 2):
                raise InputError(
                    f"the artifact's {REFERENCE} is {np.shape(reference)}, "
                    f"expected ({self.concepts}, 2)"
                )
            other.shifted = shifted(counts, reference)
            other.shares = np.stack([share_of(counts), share_of(reference)], axis=1)
            other._unsaid = shifted(counts, reference, DESCRIBED_SHIFT_RATIO)
        other._holds = other._shown_mask()
        return other

    def _shown_mask(self) -> np.ndarray:
        held = np.array([holds(e, self.floor) for e in self.catalog], dtype=bool)
        if self.agreement is None:
            return held
        zero_shot = np.array([e.zero_shot for e in self.catalog], dtype=bool)
        named = np.array([e.named for e in self.catalog], dtype=bool)
        with np.errstate(invalid="ignore"):
            weak = self.agreement < AGREEMENT  # NaN: not measured, not weak
            agrees = self.agreement >= ZERO_SHOT_AGREEMENT
        if self.shifted is not None:
            weak |= self.shifted
        return np.where(zero_shot, named & agrees, held & ~weak)

    def holds(self, concept: int) -> bool:
        """Whether a concept is shown to a reader: named, and its held-out precision reaches
        the floor (every concept when the catalog measures no precision: no floor); on a
        gallery, held to its agreement there too (module doc)."""
        return bool(self._holds[concept])

    def name_words(self) -> np.ndarray:
        """int64 [concepts]: the readout word each concept's name reads — a word concept's own,
        a named axis's by its name — and −1 where none does (what its agreement is read by)."""
        out = np.full(self.concepts, -1, dtype=np.int64)
        if self.readout is None:
            return out
        index = {word.lower(): w for w, word in enumerate(self.readout.words)}
        for entry in self.catalog[: self.axis_concepts]:
            if entry.named:
                out[entry.concept] = index.get(entry.name.lower(), -1)
        out[self.axis_concepts :] = np.arange(len(self.readout.words))
        return out

    def gallery_reason(self, concept: int) -> str | None:
        """Why a concept the artifact's floor would show is not shown on this gallery (module
        doc), in words; None where it is shown, or hidden by the floor alone."""
        if self.agreement is None or self._holds[concept]:
            return None
        entry = self.catalog[concept]
        agreement = float(self.agreement[concept])
        if entry.zero_shot:
            if np.isnan(agreement):
                return "a zero-shot word too rarely active on this gallery to be measured"
            return (
                f"a zero-shot word agreeing with its name on {agreement:.2f} of its rows here, "
                f"below {ZERO_SHOT_AGREEMENT}"
            )
        if not holds(entry, self.floor):
            return None
        if agreement < AGREEMENT:
            return f"its agreement on this gallery is {agreement:.2f}, below {AGREEMENT}"
        if self.shifted is not None and self.shares is not None and self.shifted[concept]:
            here, trained = self.shares[concept]
            return (
                f"its agreement fell from {trained:.2f} on its training rows to {here:.2f} on "
                "this gallery"
            )
        return None

    def sayable(self, concept: int) -> bool:
        """Whether a phrase may say a concept it shows: it holds and, on a gallery, its agreement
        did not fall below DESCRIBED_SHIFT_RATIO of its reference (module doc)."""
        return self.holds(concept) and not (self._unsaid is not None and self._unsaid[concept])

    def shown(
        self, ids: np.ndarray, values: np.ndarray, limit: int | None = None
    ) -> list[tuple[int, float]]:
        """What a reader is shown of one code (concept ids, values; −1 skipped): the concepts
        that hold, one per name (`merged_by_name`), at most `limit` (None: all). An axis named
        like a learnt word is left out where that word is not active in the code (`axis_words`)."""
        present = {int(c) for c in ids} | {-1}  # an axis of no learnt word's name: -1
        kept = [
            (int(c), float(v))
            for c, v in zip(ids, values, strict=True)
            if c >= 0 and self._holds[int(c)] and self._axis_word[int(c)] in present
        ]
        merged = merged_by_name(kept, [self.catalog[c].name for c, _ in kept], self.axis_concepts)
        return merged[:limit] if limit is not None else merged

    def word_margins(self, embeddings: np.ndarray) -> np.ndarray:
        """float32 [N, V]: each word concept's margin (active where ≥ 0); [N, 0] without a
        readout."""
        x = np.asarray(embeddings, dtype=np.float32)
        if self.readout is None:
            return np.zeros((len(x), 0), dtype=np.float32)
        a = self.artifact
        features = readout_input(x, self.readout.source, a.rotation, a.mean, self.k)
        return margins(features, self.readout.weight, self.readout.offset)

    def active_words(self, embeddings: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per row: (word concept ids, margins), the active ones, largest margin first."""
        m = self.word_margins(embeddings)
        out = []
        for row in m:
            on = np.flatnonzero(row >= 0)
            on = on[np.argsort(-row[on], kind="stable")]
            out.append((on.astype(np.int64) + self.axis_concepts, row[on].astype(np.float32)))
        return out

    def encode(self, embeddings: np.ndarray, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(concept ids [N, k], activations [N, k] ≥ 0), strongest first."""
        x = np.asarray(embeddings, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.artifact.dim:
            raise InputError(
                f"expected embeddings of shape [N, {self.artifact.dim}], got {x.shape}"
            )
        if not np.isfinite(x).all():
            raise InputError("embeddings hold NaN or Inf")
        axes, values = sparse_codes(x, self.artifact.rotation, self.artifact.mean, k or self.k)
        return concept_ids(axes, values), np.abs(values)

    def describe(self, embeddings: np.ndarray, k: int | None = None) -> list[list[ActiveConcept]]:
        """The active concepts of each row, with their names."""
        concepts, activations = self.encode(embeddings, k)
        return [
            [
                ActiveConcept(int(c), self.catalog[c].label, self.catalog[c].name, float(a))
                for c, a in zip(row_c, row_a, strict=True)
            ]
            for row_c, row_a in zip(concepts, activations, strict=True)
        ]

    def named(self, name: str) -> list[int]:
        """The concepts so named ([] when none is: no near misses looked for)."""
        return list(self._by_name.get(name.strip().lower(), []))

    def resolve(self, concept: str | int) -> list[int]:
        """Concept ids for an id, a label ('+12', '-3') or a name (every concept so named)."""
        if isinstance(concept, int):
            if not 0 <= concept < len(self.catalog):
                raise InputError(f"unknown concept id {concept} (0..{len(self.catalog) - 1})")
            return [concept]
        text = concept.strip()
        if text.startswith(("+", "-")) or text.isdigit():
            try:
                return [parse_concept_label(text, self.artifact.dim)]
            except ValueError as exc:
                raise InputError(str(exc)) from exc
        found = self._by_name.get(text.lower())
        if not found:
            raise InputError(f"no concept is named {concept!r}{suggestion(self.catalog, text)}")
        return found


def share_of(counts: np.ndarray) -> np.ndarray:
    """float64 [C]: won / active of agreement counts [C, 2] (NaN where none was active)."""
    won, active = np.asarray(counts, dtype=np.float64).T
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(active > 0, won / active, np.nan)


def display_floor(record: Any, catalog: Sequence[CatalogEntry]) -> float | None:
    """The floor on held-out precision a shown concept reaches: the artifact's (`extra["floor"]
    ["value"]`, picked on dev by training/cedar/floor.py; null: none, every concept shown),
    else DEFAULT_FLOOR; None (every concept shown) for a catalog that measures no precision."""
    if isinstance(record, dict) and "value" in record:
        try:
            return None if record["value"] is None else float(record["value"])
        except (TypeError, ValueError) as exc:
            raise InputError(f"malformed floor in the CEDAR artifact: {record!r}") from exc
    if all(e.precision is None for e in catalog):
        return None
    return DEFAULT_FLOOR


def holds(entry: CatalogEntry, floor: float | None) -> bool:
    """Shown at this floor: a named concept whose held-out precision reaches it (no floor:
    every concept)."""
    if floor is None:
        return True
    return entry.named and entry.precision is not None and entry.precision >= floor


def axis_words(
    catalog: Sequence[CatalogEntry], axis_concepts: int, readout: VocabularyReadout | None
) -> np.ndarray:
    """int64 [concepts]: for each named axis, the id of the learnt word concept of its name (−1
    for every other concept). The learnt word is the calibrated detector of that name, so
    `ConceptCoder.shown` shows such an axis only on a code where its word is active too: where
    the word's filter (its cut, and the index build's gate) rejects a row, the name is not
    shown there under the axis either, and an Explain never names what "require" would refuse."""
    out = np.full(len(catalog), -1, dtype=np.int64)
    if readout is None:
        return out
    learnt = {
        word.lower(): axis_concepts + w
        for w, word in enumerate(readout.words)
        if not readout.is_zero_shot(w)
    }
    for entry in catalog[:axis_concepts]:
        if entry.named:
            out[entry.concept] = learnt.get(entry.name.lower(), -1)
    return out


def merged_by_name(
    concepts: Sequence[tuple[int, float]], names: Sequence[str], axis_concepts: int
) -> list[tuple[int, float]]:
    """One entry per name (case-insensitive): the values of the concepts so named summed, under
    the id of the first in order: word concepts (ids ≥ `axis_concepts`) before axes, each kind
    by decreasing value; the merged entries in that order too."""
    order = sorted(
        range(len(concepts)), key=lambda i: (concepts[i][0] < axis_concepts, -concepts[i][1])
    )
    total: dict[str, list[Any]] = {}
    for i in order:
        concept, value = concepts[i]
        key = names[i].lower()
        if key in total:
            total[key][1] += value
        else:
            total[key] = [concept, value]
    merged = [(int(c), float(v)) for c, v in total.values()]
    merged.sort(key=lambda cv: (cv[0] < axis_concepts, -cv[1]))
    return merged
