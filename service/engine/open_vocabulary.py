"""Open vocabulary: a word or phrase the catalog lacks, filtered on as a zero-shot concept.

A filter reference by name that names no concept and is a phrase of one to three words
("giraffe", "fire hydrant", "teddy bear") becomes a zero-shot concept through the vocabulary
readout's own map (training.cedar.readout), made on its first use:

    t̃   = (t − b) / ‖t − b‖                t the phrase's text embedding (the engine's encoder),
                                              b the CEDAR mean
    s_i = ⟨x̃_i, t̃⟩                          x̃_i = (x_i − b) / ‖x_i − b‖, every gallery row
    active where s_i ≥ μ_s + z · σ_s          μ_s, σ_s: the phrase's own scores on this gallery

so the cut is calibrated without labels: z is one number per gallery, taught by the readout's
learnt words, once per bundle. Their filters on this gallery (the bundle's postings) are the
teachers, and z is the one standardised cut at which the filters of their *text* directions
agree best with them (training.cedar.readout.agreeing_z; teachers: the up to 64 learnt words
of highest held-out precision that allow between 10 rows and half the gallery,
`teacher_words`). So z follows the gallery's own score distribution: on a gallery of another
corpus the training corpus's z (`zero_shot_z`) cut nothing or everything; measured on dev
splits by benchmarks/training/label_free_cuts.py. Without teachers z falls back to the
artifact's `zero_shot_z`, and without that to the median over the readout's own zero-shot
words of where τ stands in their score distribution on this gallery. A word the readout
learnt never comes here: it resolves to its learnt row (service/engine/filtering.py).

The rows are read back from the bundle's full-length prefix (its stored vectors, exact or the
shared store's): the stored p_i = G(x_i − m)/‖x_i − m‖ (G, m the GraSP rotation and mean)
gives back the unit row x_i = m + n_i Gᵀp_i, with n_i = −a_i + √(a_i² + 1 − ‖m‖²) and
a_i = ⟨p_i, Gm⟩, so

    ⟨x_i − b, t̃⟩ = ⟨m − b, t̃⟩ + n_i ⟨p_i, Gt̃⟩
    ‖x_i − b‖²   = ‖m − b‖² + 2 n_i ⟨p_i, G(m − b)⟩ + n_i²

one pass over the rows once per bundle (n_i and ‖x_i − b‖), one per phrase (⟨p_i, Gt̃⟩: an
exact scan's cost). Its allowed rows are then kept (the last KEPT phrases): a later filter on
the phrase costs one look-up, as a catalog concept's postings do.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from indexer.format.bundle import Bundle
from indexer.format.prefix_index import exact_storage
from indexer.format.row_bitmaps import AllowedRows
from indexer.format.store import SCAN_FLOATS, StoreIndex
from service.engine.exact_scan import stored_rows
from service.errors import QueryError
from training.cedar.readout import (
    VocabularyReadout,
    agreeing_z,
    calibration_words,
    cut_in_standard_units,
    standardised_cut,
    teacher_words,
)

MAX_WORDS = 3
KEPT = 4096  # phrases whose allowed rows are kept
CHUNK = 1 << 16  # rows per product pass
CALIBRATION_WORDS = 64  # zero-shot words measured for z where the artifact records none
_WORD = r"[^\W\d_][\w'-]*"  # a letter, then letters, digits, hyphens or apostrophes
_PHRASE = re.compile(rf"^{_WORD}( {_WORD}){{0,{MAX_WORDS - 1}}}$")


def phrase_of(name: str) -> str | None:
    """The phrase a name stands for (lower case, single spaces), None unless it is one to
    MAX_WORDS words of letters (a label such as '+12' or an id is no phrase)."""
    text = " ".join(name.lower().split())
    return text if _PHRASE.match(text) else None


@dataclass(frozen=True)
class ZeroShotConcept:
    """A phrase made a concept on this gallery: its cut on s and the rows it allows."""

    phrase: str
    cut: float
    rows: AllowedRows


def recovered_norms(
    head: np.ndarray, centre: np.ndarray, grasp_mean_norm2: float, mean_gap2: float
) -> tuple[np.ndarray, np.ndarray]:
    """(n_i, ‖x_i − b‖) of every row from a_i = ⟨p_i, Gm⟩ (`head`) and ⟨p_i, G(m − b)⟩
    (`centre`), with ‖m‖² and ‖m − b‖² (module doc)."""
    a = np.asarray(head, dtype=np.float64)
    n = -a + np.sqrt(np.maximum(a * a + 1.0 - grasp_mean_norm2, 0.0))
    distance2 = mean_gap2 + 2 * n * np.asarray(centre, dtype=np.float64) + n * n
    return n, np.sqrt(np.maximum(distance2, 1e-12))


def phrase_scores(
    products: np.ndarray, offset: float, n: np.ndarray, distance: np.ndarray
) -> np.ndarray:
    """s_i = ⟨x̃_i, t̃⟩ from ⟨p_i, Gt̃⟩ (`products`) and ⟨m − b, t̃⟩ (`offset`)."""
    return ((offset + n * np.asarray(products, dtype=np.float64)) / distance).astype(np.float32)


def all_products(storage: Any, queries: np.ndarray) -> np.ndarray:
    """float32 [N, Q]: every stored row's inner product with each query [Q, d], read block by
    block (the shared store's decoded heads, `VectorStore.block_scores`; a FAISS storage's
    rows, `stored_rows`)."""
    n = int(storage.ntotal)
    out = np.empty((n, len(queries)), dtype=np.float32)
    if isinstance(storage, StoreIndex):
        block = max(1024, SCAN_FLOATS // storage.length)
        for start in range(0, n, block):
            stop = min(start + block, n)
            out[start:stop] = storage.store.block_scores(start, stop, storage.length, queries).T
        return out
    for start in range(0, n, CHUNK):
        rows = np.arange(start, min(start + CHUNK, n), dtype=np.int64)
        out[start : start + len(rows)] = stored_rows(storage, rows) @ queries.T
    return out


class OpenVocabulary:
    """Zero-shot concepts of phrases on one bundle, made on first use and kept (module doc).
    `embed`: texts → unit embeddings [N, D] (the engine's encoder). Thread-safe."""

    def __init__(self, bundle: Bundle, embed: Callable[[list[str]], np.ndarray]) -> None:
        self.bundle = bundle
        self.embed = embed
        self._kept: OrderedDict[str, ZeroShotConcept] = OrderedDict()
        self._lock = threading.Lock()

    def concept(self, phrase: str) -> ZeroShotConcept:
        """The phrase's zero-shot concept: kept, or made now and kept."""
        with self._lock:
            found = self._kept.get(phrase)
            if found is not None:
                self._kept.move_to_end(phrase)
                return found
        made = self.make(phrase)
        with self._lock:
            self._kept[phrase] = made
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
        return made

    def kept(self, phrase: str) -> bool:
        with self._lock:
            return phrase in self._kept

    def make(self, phrase: str) -> ZeroShotConcept:
        direction = self.directions(self.embed([phrase]))[0]
        scores = self.scores(direction)
        cut = standardised_cut(scores, self.z)
        rows = np.flatnonzero(scores >= cut).astype(np.int64)
        return ZeroShotConcept(phrase, cut, AllowedRows(self.bundle.rows, rows))

    def directions(self, embeddings: np.ndarray) -> np.ndarray:
        """t̃ of each text embedding: centred on b, unit."""
        t = np.asarray(embeddings, dtype=np.float64) - self.bundle.coder.artifact.mean
        return t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)

    def scores(self, directions: np.ndarray) -> np.ndarray:
        """s_i of every gallery row for one t̃ [D] ([N]) or several [W, D] ([N, W])."""
        grasp = self.bundle.grasp
        n, distance = self.geometry
        t = np.asarray(directions, dtype=np.float64)
        offset = (np.asarray(grasp.mean, np.float64) - self.bundle.coder.artifact.mean) @ t.T
        products = self.products(t @ np.asarray(grasp.rotation, np.float64).T)
        if t.ndim == 1:
            return phrase_scores(products, float(offset), n, distance)
        return phrase_scores(products, offset[None, :], n[:, None], distance[:, None])

    @cached_property
    def storage(self) -> Any:  # a FAISS index, or the shared store's StoreIndex
        storage = exact_storage(self.bundle.index(self.bundle.dim))
        if storage is None:
            raise QueryError(
                "a word or phrase outside the catalog needs the bundle's full-length vectors, "
                "and this bundle's full-length prefix does not store them"
            )
        return storage

    def products(self, queries: np.ndarray) -> np.ndarray:
        """⟨p_i, q⟩ of every row for queries [Q, D] (or one [D]): float32 [N, Q] (or [N])."""
        q = np.asarray(queries, dtype=np.float32)
        found = all_products(self.storage, np.atleast_2d(q))
        return found[:, 0] if q.ndim == 1 else found

    @cached_property
    def geometry(self) -> tuple[np.ndarray, np.ndarray]:
        """(n_i, ‖x_i − b‖) of every row: two passes, once per bundle."""
        grasp, b = self.bundle.grasp, self.bundle.coder.artifact.mean
        m = np.asarray(grasp.mean, dtype=np.float64)
        rotation = np.asarray(grasp.rotation, dtype=np.float64)
        head, centre = self.products(np.stack([rotation @ m, rotation @ (m - b)])).T
        return recovered_norms(head, centre, float(m @ m), float((m - b) @ (m - b)))

    @cached_property
    def z(self) -> float:
        """The cut in standard units: taught on this gallery by the learnt words, else the
        artifact's, else measured on this gallery from the readout's zero-shot words (module
        doc)."""
        coder = self.bundle.coder
        readout = coder.readout
        if readout is None:
            raise QueryError(
                "a word or phrase outside the catalog needs a vocabulary readout in the bundle's "
                "CEDAR artifact"
            )
        taught = self.taught_z(readout)
        if taught is not None:
            return taught
        training = coder.artifact.extra.get("readout", {}).get("training", {})
        if training.get("zero_shot_z") is not None:
            return float(training["zero_shot_z"])
        picked, cut = calibration_words(readout, CALIBRATION_WORDS)
        if not len(picked):
            raise QueryError(
                "a word or phrase outside the catalog needs a calibrated zero-shot cut, and "
                "this bundle's readout has no zero-shot words to measure it from"
            )
        return cut_in_standard_units(self.scores(readout.weight[picked]), cut)

    def taught_z(self, readout: VocabularyReadout) -> float | None:
        """z taught by the learnt words' filters on this gallery (module doc); None without
        teachers."""
        first = self.bundle.coder.axis_concepts
        bitmaps = self.bundle.concept_bitmaps
        counts = np.zeros(len(readout.words), dtype=np.int64)  # only learnt words can teach
        for w in range(len(readout.words)):
            if not readout.is_zero_shot(w) and readout.precision[w] is not None:
                counts[w] = len(bitmaps.rows_of(first + w))
        teachers = teacher_words(readout, counts, self.bundle.rows)
        if not len(teachers):
            return None
        directions = self.directions(self.embed([readout.words[w] for w in teachers]))
        scores = self.scores(directions)  # [N, W]
        teacher = np.empty(scores.shape, dtype=bool)
        for column, w in enumerate(teachers):
            rows, bits = bitmaps.get(first + int(w))
            teacher[:, column] = AllowedRows(self.bundle.rows, rows, bits).mask()
        return agreeing_z(scores, teacher)
