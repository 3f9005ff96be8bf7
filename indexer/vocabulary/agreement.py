"""Each concept's agreement on the gallery a version holds: how often, on the rows where the
concept is active, its name wins its neighbourhood by the gallery's own text directions
(training/cedar/gallery_trust.py). Measured without a label when the version's open-vocabulary
state is (indexer/vocabulary/stored_state.py), and kept beside it:

    vocabulary_agreement.npy   float32 [concepts]: each concept's agreement, NaN where it was
                               active on fewer than MIN_ROWS sampled rows or names no word
    vocabulary_agreement_counts.npy
                               int32 [concepts, 2]: per concept, (won, active) sampled rows
                               with the contest on the corrected scores ⟨x̃, t̃⟩ − h (what the
                               shift rule compares with the artifact's reference agreement)
    vocabulary_spread.npy      float64 [V, 2]: each readout word's mean and spread of its
                               corrected score over the gallery (what a row's z reads)

The sample: AGREEMENT_ROWS rows spread evenly over the gallery. A concept is active on a row as
the version's postings will hold it: an axis where it is among the row's k, a learnt word where
its entry passes its gate cut, a zero-shot word where its entry passes its zero-shot cut (before
the neighbourhood test the gate then applies, which the agreement measures). An axis is read by
the readout word of its name. training/cedar/concepts.py's `ConceptCoder.on_gallery` shows a
concept only where its agreement reaches the floor of its kind, and a learnt word or a named
axis only where its counts did not shift from its reference (training/cedar/gallery_trust.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from indexer.format.bundle import GALLERY_AGREEMENT, GALLERY_AGREEMENT_COUNTS, Bundle
from indexer.format.postings import Postings, entries_of_rows
from indexer.vocabulary.gallery_directions import centred_rows
from indexer.vocabulary.word_gate import Contest
from training.cedar.gallery_trust import agreement, spread_rows, wins

AGREEMENT = GALLERY_AGREEMENT
COUNTS = GALLERY_AGREEMENT_COUNTS
SPREAD = "vocabulary_spread.npy"
AGREEMENT_ROWS = 4096  # gallery rows the agreement is measured on, at most
ENTRY_BLOCK = 8192  # entries scored at once
CUT_SLACK = 1e-3  # below its cut by more than this, an entry is inactive whatever the rounding


def sampled(rows: int, most: int = AGREEMENT_ROWS) -> np.ndarray:
    """int64: up to `most` rows spread evenly over `rows`."""
    return spread_rows(rows, most)


@dataclass
class MeasuredAgreement:
    """What a version keeps of its concepts' agreement (module doc)."""

    share: np.ndarray  # float32 [concepts]: the agreement (standard units), NaN: not measured
    counts: np.ndarray  # int32 [concepts, 2]: (won, active) with the corrected-score contest


def measured_agreement(
    bundle: Bundle,
    postings: Postings,
    storage: Any,
    hubs: np.ndarray,
    cuts: np.ndarray,
    contest: Contest,
) -> MeasuredAgreement:
    """Every concept's agreement on the version's gallery (module doc),
    from the postings being written (before the gate), the rows' x̃ read from `storage` (the
    full-length stored rows), their hub values `hubs`, the words' gate `cuts` (NaN: not gated)
    and the `contest` (neighbourhoods and spreads)."""
    coder = bundle.coder
    readout = coder.readout
    assert readout is not None and readout.text is not None
    rows = sampled(bundle.rows)
    found_rows, concepts, _ = entries_of_rows(
        postings.indptr, postings.rows, postings.values, 0, rows
    )
    word = coder.name_words()[concepts]
    named = word >= 0
    found_rows, concepts, word = found_rows[named], concepts[named], word[named]
    grasp, cedar = bundle.grasp, coder.artifact
    features = centred_rows(storage.rows(rows), grasp.rotation, grasp.mean, cedar.mean)
    at = np.searchsorted(rows, found_rows)
    text = np.asarray(readout.text, dtype=np.float32)
    # a word's entry under its cut is not active: its neighbourhood is scored only where it
    # can be (an axis's entry, an ungated word's, one within CUT_SLACK of its cut; every
    # sampled row's score on every word in one product)
    own = (features @ text.T)[at, word] - hubs[found_rows]
    cut = cuts[word]
    can = (concepts < coder.axis_concepts) | np.isnan(cut) | (own >= cut - CUT_SLACK)
    found_rows, concepts, word, at = (a[can] for a in (found_rows, concepts, word, at))
    active = np.zeros(len(concepts), dtype=bool)
    won = np.zeros(len(concepts), dtype=bool)
    won_corrected = np.zeros(len(concepts), dtype=bool)
    for start in range(0, len(concepts), ENTRY_BLOCK):
        part = np.arange(start, min(start + ENTRY_BLOCK, len(concepts)))
        x, h, w = features[at[part]], hubs[found_rows[part]], word[part]
        words = np.concatenate([w[:, None], contest.neighbours[w]], axis=1)
        corrected = np.einsum("nd,nmd->nm", x, text[words]) - h[:, None]
        z = (corrected - contest.mu[words]) / contest.sigma[words]
        won[part] = wins(z[:, 0], z[:, 1:])
        won_corrected[part] = wins(corrected[:, 0], corrected[:, 1:])
        is_word = concepts[part] >= coder.axis_concepts
        active[part] = ~is_word | np.isnan(cuts[w]) | (corrected[:, 0] >= cuts[w])
    active_count = np.bincount(concepts[active], minlength=coder.concepts)
    won_count = np.bincount(concepts[active & won], minlength=coder.concepts)
    corrected_count = np.bincount(concepts[active & won_corrected], minlength=coder.concepts)
    return MeasuredAgreement(
        agreement(won_count, active_count),
        np.stack([corrected_count, active_count], axis=1).astype(np.int32),
    )
