"""Whether a concept's name holds on a gallery nobody labelled: its rows checked against the
gallery's own text directions.

A concept named w (a learnt word, a zero-shot word, a named axis) is active on some rows of a
gallery. Its name is read on each such row i as the open vocabulary reads a phrase
(training/cedar/gallery_cuts.py): the row's hubness-corrected score along the name's unit text
direction, standardised over the gallery,

    z_iw = (⟨x̃_i, t̃_w⟩ − h_i − μ_w) / σ_w        μ_w, σ_w: the mean and spread of that score
                                                   over the gallery (its moments, `word_spread`)

and the name **wins** on the row when it scores at least as high as each of the NEIGHBOURS
vocabulary words whose text directions lie nearest its own (`neighbourhoods`): a sleeping cat
reads "cat" before "tiger" or "kitten", a plate of broccoli "broccoli" before "corn". Standard
units make the words comparable: a word the gallery uses everywhere ("animal", "gentleman")
would otherwise beat its specific neighbours on every row.

A concept's **agreement** on the gallery is the share of its active rows where its name wins
(`agreement`), measured on a sample of the rows without a label. It is the trust a reader's
explanation is held to on that gallery, beside the training corpus's held-out precision:
training/cedar/concepts.py's `ConceptCoder.on_gallery`. A zero-shot word, which has no held-out
precision, is shown on a row only where it wins there and its agreement reaches
ZERO_SHOT_AGREEMENT; a learnt word or an axis only where its agreement reaches AGREEMENT.

**Shift from the training corpus.** Agreement read alone does not say whether a concept's
meaning moved: a learnt word that agreed with its name on 40 % of its rows in training and does
so on the gallery holds there as it did; one that agreed on 90 % and now does on 40 % does not.
So the artifact keeps each concept's *reference* agreement, read on its own training corpus's
val rows (training/cedar/reference_agreement.py), and the gallery its own, both as counts (won,
active) with the contest on the corrected scores ⟨x̃, t̃⟩ − h themselves, not in standard units
(on a gallery where a word is common, dogs among dogs, its spread is wide and its standard score
low, so its hypernym or rare neighbours win on its own rows). A learnt word or a named axis is
hidden where its gallery agreement falls below SHIFT_RATIO times its reference with confidence:
the one-sided Wilson upper bound at SHIFT_Z of its gallery share is below SHIFT_RATIO × the
reference share (`shifted`). A description (a phrase that says every one of its words at once)
takes a name only where it did not fall below DESCRIBED_SHIFT_RATIO of its reference.

The floors, NEIGHBOURS and the shift's ratio and confidence were picked on the dev pairs (the
val rows of Flickr8k in-corpus, Flickr8k → the compositional corpus and back, and Flickr8k with
its dog images held out of training → those images) by benchmarks/training/gallery_trust.py.

Pure functions.
"""

from __future__ import annotations

import numpy as np

NEIGHBOURS = 5  # the nearest words a name must beat on a row
AGREEMENT = 0.1  # a learnt word's or axis's agreement on the gallery, at least, to be shown
ZERO_SHOT_AGREEMENT = 0.3  # a zero-shot word's, at least, to be shown (it has no precision)
MIN_ROWS = 5  # sampled active rows a concept needs for its agreement to be measured
SHIFT_RATIO = 0.6  # hidden below this share of its reference agreement (with confidence)
SHIFT_Z = 1.0  # the confidence: the one-sided Wilson upper bound at this z
# a phrase says every one of its words at once: a name is said only where its agreement did not
# fall below this share of its reference (at SHIFT_Z): service/engine/descriptions.py
DESCRIBED_SHIFT_RATIO = 0.9


def neighbourhoods(text: np.ndarray, most: int = NEIGHBOURS) -> np.ndarray:
    """int64 [V, most]: for each word, the `most` other words whose unit text directions
    `text` [V, D] are nearest by cosine, nearest first (ties to the lower index)."""
    t = np.asarray(text, dtype=np.float32)
    m = min(most, max(len(t) - 1, 0))
    out = np.empty((len(t), m), dtype=np.int64)
    if m == 0:
        return out
    for start in range(0, len(t), 1024):
        cosine = t[start : start + 1024] @ t.T
        rows = np.arange(len(cosine))
        cosine[rows, start + rows] = -np.inf  # not its own neighbour
        best = np.argpartition(-cosine, m - 1, axis=1)[:, :m]
        order = np.lexsort((best, -np.take_along_axis(cosine, best, axis=1)), axis=1)
        out[start : start + len(cosine)] = np.take_along_axis(best, order, axis=1)
    return out


def word_spread(mean: np.ndarray, second: np.ndarray, text: np.ndarray) -> tuple[np.ndarray, ...]:
    """(μ_w, σ_w), float64 [V] each: the mean and spread over a gallery of every word's
    corrected score ⟨x̃, t̃_w⟩ − h, from the gallery's moments of [x̃, h] (`mean` [D + 1],
    `second` [D + 1, D + 1]: indexer/vocabulary/gallery_directions.GalleryMoments) and the
    words' unit directions `text` [V, D]."""
    t = np.asarray(text, dtype=np.float64)
    augmented = np.hstack([t, -np.ones((len(t), 1))])
    mu = augmented @ np.asarray(mean, dtype=np.float64)
    second_moment = np.einsum("vd,vd->v", augmented @ np.asarray(second, np.float64), augmented)
    return mu, np.sqrt(np.maximum(second_moment - mu * mu, 1e-12))


def standard_scores(
    features: np.ndarray,
    hubs: np.ndarray,
    text: np.ndarray,
    mu: np.ndarray,
    sigma: np.ndarray,
) -> np.ndarray:
    """float32 [n, W]: z of rows x̃ `features` [n, D] with hub values `hubs` [n] along words
    `text` [W, D] whose gallery mean and spread are `mu`, `sigma` [W] (module doc)."""
    x = np.asarray(features, dtype=np.float32)
    scores = x @ np.asarray(text, dtype=np.float32).T - np.asarray(hubs, np.float32)[:, None]
    return ((scores - mu) / sigma).astype(np.float32)


def wins(own: np.ndarray, neighbours: np.ndarray) -> np.ndarray:
    """bool [n]: where a name's z on rows (`own` [n]) reaches each of its neighbours' z on the
    same rows (`neighbours` [n, m])."""
    if neighbours.shape[1] == 0:
        return np.ones(len(own), dtype=bool)
    return np.asarray(own) >= np.asarray(neighbours).max(axis=1)


def agreement(won: np.ndarray, active: np.ndarray, min_rows: int = MIN_ROWS) -> np.ndarray:
    """float32 [C]: each concept's agreement — the rows where its name won (`won` [C]) over its
    active sampled rows (`active` [C]) — NaN where it was active on fewer than `min_rows`."""
    a = np.asarray(active, dtype=np.float64)
    share = np.asarray(won, dtype=np.float64) / np.maximum(a, 1)
    return np.where(a >= min_rows, share, np.nan).astype(np.float32)


def spread_rows(rows: int, most: int) -> np.ndarray:
    """int64: up to `most` of the positions 0 .. `rows` − 1, spread evenly (the rows an
    agreement is read on, on a gallery and on a training corpus alike)."""
    return np.unique(np.linspace(0, rows - 1, min(rows, most)).astype(np.int64))


def wilson_upper(won: np.ndarray, active: np.ndarray, z: float) -> np.ndarray:
    """float64: the one-sided Wilson upper bound at `z` of the shares `won` / `active` (an
    `active` of 0 is read as 1)."""
    n = np.maximum(np.asarray(active, np.float64), 1.0)
    p = np.asarray(won, np.float64) / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre + half


def shifted(
    gallery: np.ndarray,
    reference: np.ndarray,
    ratio: float = SHIFT_RATIO,
    z: float = SHIFT_Z,
    min_rows: int = MIN_ROWS,
) -> np.ndarray:
    """bool [C]: the concepts whose agreement on a gallery (`gallery` [C, 2]: won, active)
    falls below `ratio` times their reference agreement (`reference` [C, 2], the same counts
    on the training corpus) with confidence: the Wilson upper bound at `z` of the gallery's
    share below `ratio` × the reference share (module doc). Only where both were read on at
    least `min_rows` active rows."""
    won, active = np.asarray(gallery, np.float64).T
    reference_won, reference_active = np.asarray(reference, np.float64).T
    measured = (active >= min_rows) & (reference_active >= min_rows)
    share = reference_won / np.maximum(reference_active, 1)
    return measured & (wilson_upper(won, active, z) < ratio * share)
