"""Where a word's cut stands on a gallery of rows whose labels nobody has: the rules the open
vocabulary serves (service/engine/open_vocabulary.py) and the evaluation scores
(training/cedar/readout/quality.py), on one word's scores s = ⟨x̃, t̃⟩ over the gallery's rows.

- **Standard units.** A cut τ is kept as z = (τ − μ)/σ of the scores (`cut_in_standard_units`)
  and put back on another gallery at μ + z·σ (`standardised_cut`).
- **z taught by the learnt words.** The one z at which the learnt words' *text* directions,
  cut at μ + z·σ, agree best with those words' own learnt filters on the gallery
  (`agreeing_z`; the teachers are training.cedar.readout.vocabulary.teacher_words); without
  teachers, where the readout's zero-shot words' τ stands there
  (training.cedar.readout.vocabulary.calibration_words, in standard units).
- **The empirical null.** One z serves every word, and learnt words loose on a gallery teach a
  loose one; so a word's cut is raised until the bulk of its own scores, fitted as a normal
  (`empirical_null`), accounts for at most NULL_FDR of the rows kept: Benjamini–Hochberg's
  step-up against that null (`null_cut`, `zero_shot_cuts`). Picked on the dev splits by
  benchmarks/training/label_free_cuts.py.
- **Hubness.** A generic row (a caption near many words' directions) scores high for every
  word and passes many words' cuts. So the score a cut reads is s less the row's hub value,
  the mean of its HUB_WORDS best scores over the readout's words (`hub_scores`), as
  cross-domain similarity local scaling corrects nearest neighbours (Conneau et al. 2018).
- **The gate on learnt words.** A learnt word's cut was set on its training corpus's rows; on
  another corpus it lets through rows its own text direction places in the word's bulk. So a
  learnt word keeps a row only where that direction's hubness-corrected score reaches
  μ + GATE_Z·σ of the same score over the gallery (`gate_passes`): a loose gate, which leaves
  the rows the text direction cannot rule out. Picked on the dev splits by
  benchmarks/training/label_free_cuts.py (its `gated at μ + gσ` rules).

Pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np


def cut_in_standard_units(scores: np.ndarray, cut: float) -> float:
    """The median over the columns (words) of (τ − μ_w) / σ_w, from their scores [N, W]."""
    scores = np.asarray(scores, dtype=np.float64)
    spread = scores.std(axis=0)
    usable = spread > 0
    if not usable.any():
        return 0.0
    z = (cut - scores.mean(axis=0)[usable]) / spread[usable]
    return float(np.median(z))


Z_GRID = tuple(round(float(z), 2) for z in np.arange(0.0, 8.01, 0.05))


def agreeing_z(scores: np.ndarray, teacher: np.ndarray) -> float | None:
    """The one cut in standard units whose filters — each column of `scores` [N, W] (the
    teachers' text directions on a gallery) cut at μ + z·σ — best agree, macro F1, with the
    teachers' own learnt filters there (`teacher` [N, W] bool): the readout teaches the gallery
    where a zero-shot concept's cut stands, and no label is read. None without teachers."""
    s = np.asarray(scores, dtype=np.float32)
    if s.ndim != 2 or s.shape[1] == 0:
        return None
    best, best_f1 = Z_GRID[0], -1.0
    for z in Z_GRID:
        f1 = agreement(s, teacher, z)
        if f1 > best_f1:
            best, best_f1 = z, f1
    return float(best)


def agreement(scores: np.ndarray, teacher: np.ndarray, z: float) -> float:
    """Macro F1 of the columns of `scores` [N, W] cut at μ + z·σ against the teachers' own
    filters `teacher` [N, W] (`agreeing_z`): how far the learnt words' text directions and
    their learnt filters agree on a gallery."""
    s = np.asarray(scores, dtype=np.float32)
    wanted = np.asarray(teacher, dtype=bool)
    allowed = s >= s.mean(axis=0) + np.float32(z) * s.std(axis=0)
    hits = (allowed & wanted).sum(axis=0)
    return float((2 * hits / np.maximum(allowed.sum(axis=0) + wanted.sum(axis=0), 1)).mean())


def standardised_cut(scores: np.ndarray, z: float) -> float:
    """A zero-shot concept's cut on a gallery, from its scores there alone: μ + z·σ."""
    values = np.asarray(scores, dtype=np.float64)
    return float(values.mean() + z * values.std())


# the share of a zero-shot filter's rows that its (hubness-corrected) scores' bulk may account
# for: the q of best dev F1 among those whose precision reached the labelled cosine cut's
NULL_FDR = 0.02
HUB_WORDS = 10  # a row's best scores over the readout's words whose mean is its hub value
# the readout's words those best scores are read over, the most often active in training: the
# cost of every row's hub value grows with them (dev F1 kept with 1,024, lost with 256)
HUB_VOCABULARY = 1024
HUB_BLOCK = 1 << 13  # rows scored against every word at once
# g of the gate on learnt words, in standard units of their corrected text scores on the
# gallery: the best mean F1 over the three dev pairs among 0, 0.5, 1, 1.5 and 2 (module doc)
GATE_Z = 1.0
_ERFC = np.frompyfunc(math.erfc, 1, 1)


def hub_scores(features: np.ndarray, words: np.ndarray, best: int = HUB_WORDS) -> np.ndarray:
    """Each row's hub value, float32 [N]: the mean of its `best` highest scores ⟨x̃, t̃_w⟩ over
    the words' directions `words` [W, D], from rows x̃ `features` [N, D], HUB_BLOCK rows at a
    time. 0 for every row where there are fewer than `best` words: a row's best few scores
    over a handful of words are those words' own, not its hubness."""
    x = np.asarray(features, dtype=np.float32)
    t = np.ascontiguousarray(np.asarray(words, dtype=np.float32).T)
    hubs = np.zeros(len(x), dtype=np.float32)
    if t.shape[1] < best:
        return hubs
    for start in range(0, len(x), HUB_BLOCK):
        scores = x[start : start + HUB_BLOCK] @ t
        top = np.partition(scores, scores.shape[1] - best, axis=1)[:, -best:]
        hubs[start : start + HUB_BLOCK] = top.mean(axis=1, dtype=np.float64)
    return hubs


def hub_words(
    words: Sequence[str],
    frequency: Sequence[float] | None,
    most: int = HUB_VOCABULARY,
    least: int = HUB_WORDS,
) -> list[str]:
    """The readout's words a row's hub value is read over (`hub_scores`): the `most` most
    often active on the training rows (`frequency`; ties to the earlier word), in word order;
    none where the readout has fewer than `least` words (no hubness read)."""
    if len(words) < least:
        return []
    share = np.asarray(frequency if frequency is not None else [0.0] * len(words), np.float64)
    chosen = np.sort(np.argsort(-share, kind="stable")[: max(0, int(most))])
    return [words[int(w)] for w in chosen]


def empirical_null(scores: np.ndarray) -> tuple[float, float]:
    """The bulk of one direction's scores over a gallery as a normal null (Efron's empirical
    null): centred on their median, its spread the median absolute deviation scaled to a
    normal's σ (× 1.4826). Both read the middle of the scores, where the rows the direction
    does not describe lie; its upper tail mixes with the rows it does, and a long lower tail
    would widen a spread read from the rows below the median (the dev splits' comparison:
    benchmarks/training/label_free_cuts.py)."""
    values = np.asarray(scores, dtype=np.float64)
    centre = float(np.median(values))
    return centre, float(1.4826 * np.median(np.abs(values - centre)))


def null_cut(
    passing: np.ndarray, rows: int, null: tuple[float, float], fdr: float = NULL_FDR
) -> float:
    """The lowest of the scores `passing` (one direction's scores of every row of a gallery of
    `rows` rows past a first cut) at which the rows at or past it are at least 1/fdr times as
    many as the null (`empirical_null`) expects there: Benjamini–Hochberg's step-up against
    the gallery's own bulk, so at most about `fdr` of the rows kept are ones the bulk puts
    there by chance. +inf where no score qualifies (the filter keeps no row)."""
    values = np.sort(np.asarray(passing, dtype=np.float64))[::-1]
    centre, spread = null
    tail = _ERFC((values - centre) / (max(spread, 1e-12) * math.sqrt(2))).astype(np.float64)
    expected = rows * 0.5 * tail  # rows the null puts at or past each score
    qualifying = np.flatnonzero(expected <= fdr * np.arange(1, len(values) + 1))
    return float(values[qualifying[-1]]) if len(qualifying) else math.inf


def raised_cuts(
    scores: np.ndarray,
    first: np.ndarray,
    fdr: float = NULL_FDR,
    null: Callable[[np.ndarray], tuple[float, float]] = empirical_null,
) -> np.ndarray:
    """Per column of `scores` [N, W] (each direction's scores on a gallery): its first cut
    (`first` [W]) raised where needed to its own null's (`null_cut`; `null` fits it)."""
    s = np.asarray(scores, dtype=np.float64)
    cuts = np.empty(s.shape[1])
    for w, cut in enumerate(np.asarray(first, dtype=np.float64)):
        column = s[:, w]
        cuts[w] = null_cut(column[column >= cut], len(column), null(column), fdr)
    return cuts


def zero_shot_cuts(scores: np.ndarray, z: float, fdr: float = NULL_FDR) -> np.ndarray:
    """Per column of `scores` [N, W] (each zero-shot direction's scores on a gallery): its cut,
    μ + z·σ (`standardised_cut`) raised where needed to the null's, as the service cuts a
    phrase (service/engine/open_vocabulary.py)."""
    s = np.asarray(scores, dtype=np.float64)
    return raised_cuts(s, s.mean(axis=0) + z * s.std(axis=0), fdr)


def gate_passes(corrected: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """bool [n, W]: where rows' hubness-corrected scores [n, W] (⟨x̃, t̃_w⟩ − h) reach each
    learnt word's gate cut [W] (μ_w + GATE_Z·σ_w of those scores on the gallery; NaN: the word
    is not gated, every row passes)."""
    c = np.asarray(cuts, dtype=np.float32)
    return (np.asarray(corrected, dtype=np.float32) >= c) | np.isnan(c)
