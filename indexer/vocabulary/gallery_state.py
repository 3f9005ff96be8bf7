"""What every zero-shot phrase on one bundle reads, measured once (the rules are in
service/engine/open_vocabulary.py's module doc): at index build where the CEDAR artifact holds its
words' text directions (indexer/vocabulary/stored_state.py keeps it in the version), else by the
service at the first phrase:

- the moments of [x̃, h] over a seeded sample of the rows (gallery_directions.GalleryMoments),
  so that a phrase's μ + z·σ and the rows it expects cost no pass over the gallery;
- z, taught by the readout's learnt words on those rows (their filters as learnt, read from the
  rows' own margins — not from the postings, which keep only the rows that pass each word's
  gate, indexer/vocabulary/word_gate.py — against their text directions:
  training.cedar.gallery_cuts.agreeing_z), else the artifact's `zero_shot_z`, else measured
  from the readout's zero-shot words;
- every row's hub value h (training.cedar.gallery_cuts.hub_scores over the readout's
  `hub_words`), kept in memory: a pass over every row unless the sample holds them all.

`measured_state` does the I/O: it reads the bundle's stored rows and the words' unit text
directions through the callable it is given (`readout_directions`: the artifact's own, so that
the build and the service measure the same state; else the service's encoder).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from indexer.format.bundle import Bundle
from indexer.vocabulary.gallery_directions import (
    GalleryMoments,
    centred_rows,
    decoded_blocks,
    gallery_moments,
    sampled_rows,
    with_hubs,
)
from training.cedar.gallery_cuts import agreeing_z, cut_in_standard_units, hub_scores, hub_words
from training.cedar.readout.vocabulary import (
    VocabularyReadout,
    active_on,
    calibration_words,
    teacher_words,
)
from training.core.errors import InputError

CALIBRATION_WORDS = 64  # zero-shot words measured for z where the artifact records none
SAMPLE_BLOCK = 1 << 14  # sampled rows decoded at once


class VocabularyError(InputError):
    """A bundle whose readout cannot make a zero-shot concept (the service answers
    INVALID_ARGUMENT with its message)."""


@dataclass(frozen=True)
class GalleryState:
    """The moments of [x̃, h], z, and every row's hub value h (module doc)."""

    moments: GalleryMoments
    z: float
    hubs: np.ndarray  # float32 [N]


def measured_state(
    bundle: Bundle,
    storage: Any,
    directions: Callable[[list[str]], np.ndarray],
    sample_rows: int,
    advance: Callable[[int], object] | None = None,
    known_hubs: np.ndarray | None = None,
) -> GalleryState:
    """The bundle's state from its full-length stored rows (`storage`) and the unit text
    directions t̃ of words (`directions`): one pass over at most `sample_rows` sampled rows,
    and one over every row for the hub values where the sample is not every row. `known_hubs`:
    the hub values of the first rows, carried from a base version whose rows these are (a
    row's hub value is a function of that row alone): only the rows past them are scored."""
    readout = bundle.coder.readout
    if readout is None:
        raise VocabularyError(
            "a word or phrase outside the catalog needs a vocabulary readout in the bundle's "
            "CEDAR artifact"
        )
    grasp, cedar = bundle.grasp, bundle.coder.artifact
    rows = sampled_rows(bundle.rows, sample_rows)
    learnt = learnt_words(readout)
    hub_directions = np.zeros((0, bundle.dim))  # too few words to read hubness from
    if vocabulary := hub_words(readout.words, readout.frequency):
        hub_directions = directions(vocabulary)
    known = np.zeros(0, np.float32) if known_hubs is None else np.asarray(known_hubs, np.float32)
    blocks, hubs, active = [], [], []
    for start in range(0, len(rows), SAMPLE_BLOCK):
        block = rows[start : start + SAMPLE_BLOCK]
        stored = storage.rows(block)
        centred = centred_rows(stored, grasp.rotation, grasp.mean, cedar.mean)
        hubs.append(hub_scores(centred, hub_directions))
        carried = block < len(known)
        hubs[-1][carried] = known[block[carried]]
        blocks.append(with_hubs(centred, hubs[-1]))
        # x̃ + b has x̃ as its own centred unit row: the readout's input, whatever the row's norm
        active.append(
            active_on(
                readout, centred + cedar.mean, cedar.rotation, cedar.mean, bundle.coder.k, learnt
            )
        )
    moments = gallery_moments(blocks, bundle.rows)
    features = np.concatenate(blocks)[:, :-1]
    recorded = cedar.extra.get("readout", {}).get("training", {}).get("zero_shot_z")
    z = taught_z(
        readout, features, np.concatenate(active), learnt, bundle.rows, directions, recorded
    )
    if len(rows) == bundle.rows:  # every row was sampled, in order
        every_hub = np.concatenate(hubs)
    else:
        every_hub = np.empty(bundle.rows, dtype=np.float32)
        every_hub[: len(known)] = known
        for start, x in centred_blocks(bundle, storage, len(known)):
            first = max(start, len(known))  # the block holding the first row past them
            every_hub[first : start + len(x)] = told(
                hub_scores(x[first - start :], hub_directions), advance
            )
    return GalleryState(moments, z, every_hub)


def told(rows: np.ndarray, advance: Callable[[int], object] | None) -> np.ndarray:
    """A block of per-row values, its row count told to `advance` (a progress bar's), if any."""
    if advance is not None:
        advance(len(rows))
    return rows


def readout_directions(readout: VocabularyReadout) -> Callable[[list[str]], np.ndarray] | None:
    """The unit text directions t̃ of the readout's own words, by word, from the artifact
    (`VocabularyReadout.text`); None for an artifact that does not hold them."""
    if readout.text is None:
        return None
    text = readout.text
    index = {word: w for w, word in enumerate(readout.words)}
    return lambda words: np.asarray(text[[index[w] for w in words]], dtype=np.float64)


def centred_blocks(
    bundle: Bundle, storage: Any, first: int = 0
) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, x̃) of every block of rows in row order, from the block holding row `first`
    on (gallery_directions.decoded_blocks): one pass over the stored rows."""
    grasp, b = bundle.grasp, bundle.coder.artifact.mean
    for start, stored in decoded_blocks(storage, first):
        yield start, centred_rows(stored, grasp.rotation, grasp.mean, b)


def augmented_blocks(bundle: Bundle, storage: Any, hubs: np.ndarray) -> Iterator[np.ndarray]:
    """Every row's [x̃, h] (gallery_directions.with_hubs), block by block in row order."""
    for start, centred in centred_blocks(bundle, storage):
        yield with_hubs(centred, hubs[start : start + len(centred)])


def learnt_words(readout: VocabularyReadout) -> np.ndarray:
    """The readout's learnt words with a held-out precision (those that may teach z)."""
    return np.array(
        [
            w
            for w in range(len(readout.words))
            if not readout.is_zero_shot(w) and readout.precision[w] is not None
        ],
        dtype=np.int64,
    )


def taught_z(
    readout: VocabularyReadout,
    features: np.ndarray,
    active: np.ndarray,
    learnt: np.ndarray,
    total_rows: int,
    directions: Callable[[list[str]], np.ndarray],
    recorded: float | None,
) -> float:
    """z from the sampled rows x̃ (`features` [n, D]) and where the `learnt` words are active on
    them (`active` [n, L], their own margins: the filters as learnt, whatever the version's
    postings keep): the teachers (training.cedar.readout.vocabulary.teacher_words, their rows
    counted on the sample and scaled to the gallery's `total_rows`) teach it where there are
    any, else the artifact's `zero_shot_z` (`recorded`), else the readout's zero-shot words' cut
    in standard units."""
    counts = np.zeros(len(readout.words), dtype=np.int64)
    scale = total_rows / max(1, len(features))
    counts[learnt] = np.rint(active.sum(axis=0) * scale).astype(np.int64)
    teachers = teacher_words(readout, counts, total_rows)
    if len(teachers):
        column = {int(w): i for i, w in enumerate(learnt)}
        words = directions([readout.words[w] for w in teachers]).astype(np.float32)
        teacher = active[:, [column[int(w)] for w in teachers]]
        taught = agreeing_z(features @ words.T, teacher)
        if taught is not None:
            return taught
    if recorded is not None:
        return float(recorded)
    fallback, tau = calibration_words(readout, CALIBRATION_WORDS)
    if not len(fallback):
        raise VocabularyError(
            "a word or phrase outside the catalog needs a calibrated zero-shot cut, and this "
            "bundle's readout has no zero-shot words to measure it from"
        )
    weights = np.asarray(readout.weight[fallback], dtype=np.float32)
    return cut_in_standard_units(features @ weights.T, tau)
