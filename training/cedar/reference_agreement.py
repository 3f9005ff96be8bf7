"""Each concept's *reference* agreement: how often its name wins its neighbourhood on the rows of
the corpus its CEDAR artifact was trained on (training/cedar/gallery_trust.py's shift rule
compares a gallery's agreement with it). Kept in the artifact as the tensor

    reference_agreement    int32 [concepts, 2]: per concept, (won, active) over up to
                           REFERENCE_ROWS of the cache's val rows

read as an index build reads a gallery's (indexer/vocabulary/agreement.py): the rows' x̃ and
hub values h, every word's gate cut μ_w + GATE_Z·σ_w over the whole cache; a learnt word active
on a row where its margin is ≥ 0 and its corrected score passes its gate, a named axis where it
is among the row's k (read by the readout word of its name); its name won where its corrected
score ⟨x̃, t̃⟩ − h reaches each of its neighbours'. Zero-shot words are not counted (0, 0):
they have no training rows to shift from. Written at fit (training/cedar/fit.py) and by `strata
train floor` for an artifact made before it was kept.
"""

from __future__ import annotations

import numpy as np

from training.cedar.concepts import ConceptCoder
from training.cedar.data import SplitRows
from training.cedar.gallery_cuts import GATE_Z, gate_passes, hub_scores, hub_words
from training.cedar.gallery_trust import spread_rows, word_spread
from training.cedar.readout.artifact import word_neighbours
from training.core.artifacts import TransformArtifact
from training.core.metrics import unit_rows

REFERENCE_ROWS = 4096  # val rows the reference is read on, at most (spread evenly)
BLOCK = 256  # rows whose neighbourhood contests are read at once


def reference_agreement(artifact: TransformArtifact, data: SplitRows) -> np.ndarray | None:
    """int32 [concepts, 2]: the module doc's counts on `data` (the artifact's training cache);
    None where the artifact has no readout with text directions (nothing names a concept's
    word) or the cache has no val rows."""
    coder = ConceptCoder(artifact)
    readout = coder.readout
    val = data.rows("val")
    if readout is None or readout.text is None or len(val) == 0:
        return None
    text = np.asarray(readout.text, dtype=np.float32)
    position = {word: w for w, word in enumerate(readout.words)}
    hub_text = text[[position[w] for w in hub_words(readout.words, readout.frequency)]]
    features = unit_rows(data.embeddings - artifact.mean).astype(np.float32)
    hubs = hub_scores(features, hub_text)
    augmented = np.hstack([features, hubs[:, None]]).astype(np.float64)
    mu, sigma = word_spread(augmented.mean(axis=0), augmented.T @ augmented / len(augmented), text)
    zero_shot = np.array([readout.is_zero_shot(w) for w in range(len(readout.words))])
    cuts = np.where(zero_shot, np.nan, mu + GATE_Z * sigma).astype(np.float32)

    rows = val[spread_rows(len(val), REFERENCE_ROWS)]
    scores = features[rows] @ text.T - hubs[rows, None]
    near = word_neighbours(readout)
    won = np.ones(scores.shape, dtype=bool)
    if near.shape[1]:
        for s in range(0, len(rows), BLOCK):
            won[s : s + BLOCK] = scores[s : s + BLOCK] >= scores[s : s + BLOCK, near].max(axis=2)
    learnt = (coder.word_margins(data.embeddings[rows]) >= 0) & ~zero_shot
    learnt &= gate_passes(scores, cuts)

    counts = np.zeros((coder.concepts, 2), dtype=np.int64)
    a = coder.axis_concepts
    counts[a:, 0] = (learnt & won).sum(axis=0)
    counts[a:, 1] = learnt.sum(axis=0)
    axes, _ = coder.encode(data.embeddings[rows])
    word = coder.name_words()[axes]
    named = word >= 0
    r = np.broadcast_to(np.arange(len(rows))[:, None], axes.shape)
    np.add.at(counts[:, 1], axes[named], 1)
    np.add.at(counts[:, 0], axes[named], won[r[named], word[named]].astype(np.int64))
    return counts.astype(np.int32)
