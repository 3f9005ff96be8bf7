"""The vocabulary readout: one named concept per word, whose name holds by construction.

CEDAR's axes are the concept *basis* (reconstruction, explanations, CDS scope), but an axis is
rarely one word. A user asks for "dog" or excludes "snow"; so every word w of the naming
vocabulary is its own concept, with an activation per row learnt where labels exist:

    x̃        = (x − b) / ‖x − b‖         x the row, b the CEDAR training mean ("dense" input);
                                          "code": x the CEDAR reconstruction from its k active
                                          concepts, so the filter reads what Explain shows
    logit_w  = ⟨x̃, W_w⟩ + c_w            W_w starts at s·(t_w − b)/‖t_w − b‖ (t_w the word's
                                          text embedding, Label-free CBM's start), c_w at c₀
    margin_w = logit_w − θ_w              the activation a filter reads: active when ≥ 0

Labels come free with a captioned corpus: the words of an image's *other* captions. Training
targets are soft — the mean over n = 1, 2, 3 of "at least n other captions use w"
(training.cedar.naming.word_relevance) — under binary cross-entropy, with an optional L2
pull of W towards its start (weight `anchor`; 0 by default: every pull measured lowered both
dev splits, benchmarks/training/readout_capacity.py --anchor, so a word's text direction
counts only as the start and early stopping keeps it near). Adam, minibatches, model
selection on the val rows' loss (training/loop.py;
the trainer is in training/cedar/readout_training.py, so that reading a readout loads no
torch).

Thresholds θ_w are picked per word on the train and val rows together (up to
CALIBRATION_TRAIN_ROWS of the train rows, a seeded sample: the readout is linear and fits its
train rows no better than its val rows, so they give a rare word's cut several times the
positives): the cut of best F1 against the strict relevance (at least 2 other captions use w),
where the word has at least `min_calibration` relevant rows there and that cut, cross-fitted,
holds out better than the global one (below); elsewhere one global θ, the cut of best mean F1
over the words that have them. Each word's held-out precision P(relevant | active) and recall,
which the catalog shows, come from cross-fitting: the val rows split in two halves by image, θ
picked on the train rows and one half, and scored on the other half, both ways.

Zero-shot words. A word the training captions use too rarely to learn from (fewer than
`vocabulary_min_count` times, or never: the caption lexicon's words) is still a concept, the
cosine filter of its text direction: margin_w = ⟨x̃, t̃_w⟩ − τ, with t̃_w = (t_w − b)/‖t_w − b‖
and τ the one cut of best mean F1 on the val rows over the learnt words' own text directions
(`cosine_cut`). It has no held-out precision, and says so. On a gallery the service cuts any
word outside the learnt ones at μ + z·σ of its own scores there, raised until the bulk of those
scores accounts for at most NULL_FDR of the rows kept (training/cedar/gallery_cuts.py; the rule
in service/engine/open_vocabulary.py). The artifact also keeps every word's t̃_w (`text`), so that
an index build measures what the service's zero-shot cuts read on its gallery without an encoder
(indexer/vocabulary/). How an artifact stores a readout: training/cedar/readout_artifact.py. Pure
functions; the caller does the I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field

from training.cedar.gallery_cuts import cut_in_standard_units
from training.cedar.sparse_codes import reconstruct
from training.core.config import ConfigModel
from training.core.errors import InputError
from training.core.metrics import unit_rows

SOFT_LEVELS = (1, 2, 3)  # soft target: mean of "at least n other captions use the word"
CALIBRATION_TRAIN_ROWS = 30_000  # train rows that join the val rows in picking cuts
SORT_BLOCK = 256  # words whose scores global_cut sorts at once


class ReadoutConfig(ConfigModel):
    source: str = Field(
        "dense", pattern="^(dense|code)$", description="read x, or its reconstruction at k"
    )
    epochs: int = Field(12, gt=0)
    batch_size: int = Field(512, gt=1)
    learning_rate: float = Field(1e-3, gt=0)
    anchor: float = Field(
        0.0, ge=0, description="weight of ‖W − W₀‖² (per word, mean); 0: the start alone"
    )
    scale: float = Field(10.0, gt=0, description="s: the start's logit per unit cosine")
    init_offset: float = Field(-3.0, description="c₀: every word's starting offset")
    patience: int = Field(3, ge=1)
    min_calibration: int = Field(
        5, ge=1, description="relevant calibration rows a word needs for its own threshold"
    )
    vocabulary_min_count: int = Field(3, ge=1, description="occurrences a word needs")
    zero_shot: bool = Field(
        True, description="add the rarer caption words and the lexicon's as zero-shot concepts"
    )
    seed: int = 0

    def fingerprint(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()


@dataclass
class VocabularyReadout:
    """The learnt concepts: margin_w(x) = ⟨x̃, weight_w⟩ + offset_w (offset = c_w − θ_w)."""

    words: list[str]
    classes: list[str]
    weight: np.ndarray  # float32 [V, D]
    offset: np.ndarray  # float32 [V]
    threshold: np.ndarray  # float32 [V]: θ_w, in logits (kept for the record)
    own_threshold: np.ndarray  # bool [V]: θ_w calibrated for this word (else the global one)
    precision: list[float | None]  # held-out P(relevant | active); None: not measurable
    recall: list[float | None]
    support: list[int]  # relevant training rows
    source: str = "dense"
    frequency: list[float] | None = None  # share of training rows where the word is active
    zero_shot: list[bool] | None = None  # True: no labels, the cosine filter (module doc)
    text: np.ndarray | None = None  # float32 [V, D]: each word's t̃_w; None in older artifacts

    def __post_init__(self) -> None:
        v = len(self.words)
        if self.weight.ndim != 2 or self.weight.shape[0] != v or self.offset.shape != (v,):
            raise InputError(
                f"readout of {v} words has weight {self.weight.shape}, offset {self.offset.shape}"
            )
        if self.text is not None and self.text.shape != self.weight.shape:
            raise InputError(
                f"readout of {v} words has text directions {self.text.shape}, "
                f"weight {self.weight.shape}"
            )

    def is_zero_shot(self, word: int) -> bool:
        return bool(self.zero_shot[word]) if self.zero_shot is not None else False


def readout_input(
    x: np.ndarray, source: str, rotation: np.ndarray, mean: np.ndarray, k: int
) -> np.ndarray:
    """x̃ of the module doc: the unit centred row, or of its reconstruction at k ("code")."""
    x = np.asarray(x, dtype=np.float32)
    if source == "code":
        x = reconstruct(x, rotation, mean, k).astype(np.float32)
    return unit_rows(x - mean).astype(np.float32)


def margins(features: np.ndarray, weight: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """float32 [N, V]: every word's margin on rows x̃ (active where ≥ 0)."""
    return np.asarray(features, dtype=np.float32) @ weight.T + offset


def active_on(
    readout: VocabularyReadout,
    x: np.ndarray,
    rotation: np.ndarray,
    mean: np.ndarray,
    k: int,
    words: np.ndarray,
) -> np.ndarray:
    """bool [N, W]: where each of the readout's `words` is active on rows x (margin ≥ 0), the
    CEDAR artifact's `rotation`, `mean` and `k` making its input."""
    features = readout_input(x, readout.source, rotation, mean, k)
    return margins(features, readout.weight[words], readout.offset[words]) >= 0


def soft_targets(levels: Sequence[Any]) -> np.ndarray:
    """float32 [N, V]: the mean of the relevance matrices at each level (dense)."""
    return np.mean([np.asarray(m.toarray(), dtype=np.float32) for m in levels], axis=0)


def best_cuts(scores: np.ndarray, relevant: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per word (column): the threshold of best F1 (rows with score ≥ it are allowed; the
    midpoint between the last allowed and first refused score) and that F1. Exact: every cut
    between sorted scores (ties in row order) is tried. A word with no relevant row gets +inf
    and F1 0."""
    cuts, f1 = np.full(scores.shape[1], np.inf), np.zeros(scores.shape[1])
    for w in range(scores.shape[1]):
        cuts[w], f1[w] = word_cut(scores[:, w], relevant[:, w])
    return cuts, f1


def word_cut(scores: np.ndarray, relevant: np.ndarray) -> tuple[float, float]:
    """One word's best-F1 cut and its F1 (best_cuts). Only its top rows are ranked: allowing
    the R highest rows (R relevant) scores F1 f₀ = hits/R, and allowing k rows scores at most
    2R/(k + R), below f₀ once k > R(2/f₀ − 1), so no cut past those rows can be better."""
    n, wanted = len(scores), int(relevant.sum())
    if wanted == 0:
        return float("inf"), 0.0
    first = np.argpartition(-scores, wanted - 1)[:wanted] if wanted < n else np.arange(n)
    found = int(relevant[first].sum())
    edge = scores[first].min()
    if (scores == edge).sum() > (scores[first] == edge).sum():  # a tie across the R-th row
        found = max(0, found - int((scores[first] == edge).sum()))  # fewer hits: rank more
    reach = n if found == 0 else min(n, int(wanted * (2 * wanted / found - 1)) + 2)
    if reach < n:  # every row at or above the reach-th score: a prefix of the whole ranking
        top = np.flatnonzero(scores >= scores[np.argpartition(-scores, reach - 1)[reach - 1]])
    else:
        top = np.arange(n)
    top = top[np.lexsort((top, -scores[top]))]  # by score, ties in row order
    ranked = scores[top].astype(np.float64)
    f1 = 2 * np.cumsum(relevant[top], dtype=np.float64) / (np.arange(1, len(top) + 1) + wanted)
    best = int(np.argmax(f1))
    if best + 1 < len(top):
        below = ranked[best + 1]
    elif len(top) < n:  # the first row past the ranked ones
        below = float(np.max(scores[scores < ranked[-1]]))
    else:
        return float(ranked[best]), float(f1[best])
    return float((ranked[best] + below) / 2), float(f1[best])


def global_cut(scores: np.ndarray, relevant: np.ndarray, words: np.ndarray) -> float:
    """The one threshold of best mean F1 over `words` (columns), from a grid of score
    quantiles; each word's counts at every grid point read off its sorted scores."""
    if not len(words):
        return 0.0
    s, r = scores[:, words], relevant[:, words]
    grid = np.unique(np.quantile(s, np.linspace(0.5, 0.9999, 400)))
    allowed, hits = np.zeros((2, len(grid), len(words)))
    for first in range(0, len(words), SORT_BLOCK):
        block = np.ascontiguousarray(s[:, first : first + SORT_BLOCK].T)  # a word's scores a row
        wanted = np.ascontiguousarray(r[:, first : first + SORT_BLOCK].T)
        for i, column in enumerate(np.sort(block, axis=1)):
            allowed[:, first + i] = len(column) - np.searchsorted(column, grid, side="left")
            positives = np.sort(block[i][wanted[i]])
            hits[:, first + i] = len(positives) - np.searchsorted(positives, grid, side="left")
    f1 = (2 * hits / np.maximum(allowed + r.sum(axis=0), 1)).mean(axis=1)
    return float(grid[int(np.argmax(f1))])


def text_directions(word_embeddings: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """float32 [V, D]: t̃_w, each word's centred unit text direction."""
    return unit_rows(np.asarray(word_embeddings, dtype=np.float32) - mean).astype(np.float32)


def cosine_cut(
    features: np.ndarray, directions: np.ndarray, relevant: np.ndarray, min_calibration: int
) -> float:
    """τ of the zero-shot words: the one cosine cut ⟨x̃, t̃_w⟩ ≥ τ of best mean F1 on these
    (val) rows, over the words with at least `min_calibration` relevant rows."""
    supported = np.flatnonzero(np.asarray(relevant).sum(axis=0) >= min_calibration)
    return global_cut(np.asarray(features) @ np.asarray(directions).T, relevant, supported)


def zero_shot_z(features: np.ndarray, directions: np.ndarray, cut: float) -> float:
    """The zero-shot cut τ in standard units on these rows: the median over the words'
    directions t̃_w of (τ − μ_w) / σ_w, μ_w and σ_w the mean and spread of ⟨x̃, t̃_w⟩ over the
    rows. A gallery without labels puts a new word's cut at μ + z·σ of its own scores
    (`standardised_cut`): where τ stood, relative to the spread, on the corpus it was fitted on."""
    scores = np.asarray(features, dtype=np.float32) @ np.asarray(directions, np.float32).T
    return cut_in_standard_units(scores, cut)


def calibration_words(readout: VocabularyReadout, most: int = 64) -> tuple[np.ndarray, float]:
    """Up to `most` of the readout's zero-shot words, spread over them, and their cut τ: what a
    gallery measures z from when the artifact records none (`cut_in_standard_units` of their
    scores there). Empty without zero-shot words."""
    zero_shot = [w for w in range(len(readout.words)) if readout.is_zero_shot(w)]
    if not zero_shot:
        return np.zeros(0, dtype=np.int64), 0.0
    picked = np.asarray(zero_shot)[
        np.unique(np.linspace(0, len(zero_shot) - 1, min(most, len(zero_shot))).astype(int))
    ]
    return picked, float(-readout.offset[picked[0]])  # a zero-shot word's offset is −τ


TEACHERS = 64  # learnt words that teach a gallery its zero-shot cut
MIN_TEACHER_ROWS = 10  # rows a teacher allows on the gallery, at least


def teacher_words(
    readout: VocabularyReadout, allowed: np.ndarray, rows: int, most: int = TEACHERS
) -> np.ndarray:
    """The learnt words that teach a gallery of `rows` rows its zero-shot cut (`agreeing_z`):
    those whose filter allows (`allowed` [V], rows per word on that gallery) at least
    MIN_TEACHER_ROWS and at most half of the rows, the `most` of highest held-out precision."""
    counts = np.asarray(allowed)
    usable = [
        w
        for w in range(len(readout.words))
        if not readout.is_zero_shot(w)
        and readout.precision[w] is not None
        and MIN_TEACHER_ROWS <= counts[w] <= rows // 2
    ]
    usable.sort(key=lambda w: (-float(readout.precision[w] or 0.0), w))
    return np.asarray(usable[:most], dtype=np.int64)


def with_zero_shot(
    readout: VocabularyReadout,
    words: Sequence[str],
    classes: Sequence[str],
    directions: np.ndarray,
    cut: float,
) -> VocabularyReadout:
    """The readout with `words` appended as zero-shot concepts: weight t̃_w, offset −τ (module
    doc); no precision, recall or support. A word the readout already has is refused."""
    known = set(readout.words)
    clash = [w for w in words if w in known]
    if clash:
        raise InputError(f"zero-shot words already learnt: {', '.join(clash[:5])}")
    n = len(words)
    flags = [readout.is_zero_shot(w) for w in range(len(readout.words))]
    return dataclasses.replace(
        readout,
        words=[*readout.words, *words],
        classes=[*readout.classes, *classes],
        weight=np.concatenate([readout.weight, np.asarray(directions, np.float32)]),
        offset=np.concatenate([readout.offset, np.full(n, -cut, dtype=np.float32)]),
        threshold=np.concatenate([readout.threshold, np.full(n, cut, dtype=np.float32)]),
        own_threshold=np.concatenate([readout.own_threshold, np.zeros(n, dtype=bool)]),
        precision=[*readout.precision, *[None] * n],
        recall=[*readout.recall, *[None] * n],
        support=[*readout.support, *[0] * n],
        frequency=None,
        zero_shot=[*flags, *[True] * n],
        text=None
        if readout.text is None
        else np.concatenate([readout.text, np.asarray(directions, np.float32)]),
    )


def active_share(readout: VocabularyReadout, features: np.ndarray) -> list[float]:
    """Per word: the share of rows x̃ where its margin is ≥ 0 (in chunks of 8,192 rows)."""
    active = np.zeros(len(readout.words), dtype=np.int64)
    for start in range(0, len(features), 8192):
        chunk = features[start : start + 8192]
        active += (margins(chunk, readout.weight, readout.offset) >= 0).sum(0)
    return [round(float(a) / max(len(features), 1), 6) for a in active]


def calibration_sample(rows: int, seed: int) -> np.ndarray:
    """int [S]: the train rows (positions, ascending) whose cuts join the val rows' in
    `calibrate`: every row up to CALIBRATION_TRAIN_ROWS, a seeded sample beyond."""
    if rows <= CALIBRATION_TRAIN_ROWS:
        return np.arange(rows)
    chosen = np.random.default_rng(seed).choice(rows, CALIBRATION_TRAIN_ROWS, replace=False)
    return np.sort(chosen)


def split_calibration(groups: Sequence[str], seed: int) -> np.ndarray:
    """bool per row: True for the first half of the val rows, False for the second (by group,
    so an image's captions stay together): the halves of the cross-fitting."""
    keys = [hashlib.sha256(f"{seed}:{g}".encode()).digest()[0] for g in groups]
    return np.array([k % 2 == 0 for k in keys], dtype=bool)


def thresholds(
    logits: np.ndarray, relevant: np.ndarray, min_calibration: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """θ per word from these rows: its own best-F1 cut where it has `min_calibration` relevant
    rows, else the global cut; (θ, own, the global cut)."""
    cuts, _ = best_cuts(logits, relevant)
    supported = relevant.sum(axis=0) >= min_calibration
    overall = global_cut(logits, relevant, np.flatnonzero(supported))
    return np.where(supported, cuts, overall), supported, overall


def held_out(
    logits: np.ndarray, relevant: np.ndarray, threshold: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hits, allowed, relevant) counts per word of θ on these rows."""
    allowed = logits >= threshold
    return (allowed & relevant).sum(axis=0), allowed.sum(axis=0), relevant.sum(axis=0)


def calibrate(
    logits: np.ndarray,
    relevant: np.ndarray,
    halves: np.ndarray,
    min_calibration: int,
    train: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, np.ndarray | float]:
    """θ per word on the val rows (`logits`, `relevant`) and the `train` rows' (logits,
    relevance) together, and each word's held-out precision / recall, by cross-fitting:
    thresholds picked on the train rows and one half of the val rows (by image) and scored on
    the other half, both ways, counts pooled (NaN where it allows or has no relevant row). A
    word keeps its own best-F1 cut only where it has `min_calibration` relevant rows and that
    cut, cross-fitted, scores a higher held-out F1 than the global cut does for the word;
    elsewhere the global cut, whose held-out figures it then reports. (A word the readout
    cannot separate still has a best cut on its few positives, often deep in its ranking: one
    that lets a large share of the rows through and holds on no other rows.)"""
    if train is None:
        train = (logits[:0], relevant[:0])
    train_logits, train_relevant = train
    fitted = np.concatenate([train_logits, logits]), np.concatenate([train_relevant, relevant])
    threshold, supported, overall = thresholds(*fitted, min_calibration)
    words = logits.shape[1]
    own_counts, global_counts = np.zeros((3, words)), np.zeros((3, words))
    fold_minimum = min_calibration if len(train_logits) else max(1, min_calibration // 2)
    for fit in (halves, ~halves):
        if not fit.any() or fit.all():
            continue
        theta, _, cut = thresholds(
            np.concatenate([train_logits, logits[fit]]),
            np.concatenate([train_relevant, relevant[fit]]),
            fold_minimum,
        )
        own_counts += held_out(logits[~fit], relevant[~fit], theta)
        global_counts += held_out(logits[~fit], relevant[~fit], np.full(words, cut))
    own = supported & (held_out_f1(*own_counts) > held_out_f1(*global_counts))
    hits, allowed, wanted = np.where(own, own_counts, global_counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(allowed > 0, hits / allowed, np.nan)
        recall = np.where(wanted > 0, hits / wanted, np.nan)
    return {
        "threshold": np.where(own, threshold, overall).astype(np.float32),
        "own": own,
        "global": overall,
        "precision": precision,
        "recall": recall,
    }


def held_out_f1(hits: np.ndarray, allowed: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """F1 per word from pooled counts (0 where nothing is allowed or relevant)."""
    total = allowed + wanted
    return np.where(total > 0, 2 * hits / np.maximum(total, 1), 0.0)


@dataclass
class ReadoutRows:
    """What the readout learns from: x̃ and soft targets of the train rows (and the strict
    relevance of those that join the calibration), x̃ and the strict relevance of the val rows,
    their halves for cross-fitting, the words and their embeddings."""

    words: list[str]
    classes: list[str]
    word_embeddings: np.ndarray  # [V, D]
    train_x: np.ndarray
    train_targets: np.ndarray  # float32 [N, V]
    train_support: np.ndarray  # int [V]: relevant (strict) training rows
    train_sample: np.ndarray  # int [S]: the train rows that join the cuts' calibration
    train_relevant: np.ndarray  # bool [S, V], strict, of those rows
    val_x: np.ndarray
    val_targets: np.ndarray
    val_relevant: np.ndarray  # bool [M, V], strict
    calibration: np.ndarray  # bool [M]: the first cross-fitting half of the val rows


def mean_held_out(readout: VocabularyReadout) -> dict[str, float]:
    """Mean held-out precision and recall over the words where each is measured."""
    p = [x for x in readout.precision if x is not None]
    r = [x for x in readout.recall if x is not None]
    return {
        "precision": float(np.mean(p)) if p else 0.0,
        "recall": float(np.mean(r)) if r else 0.0,
    }


def named_margins(
    word_margins: np.ndarray, readout_words: Sequence[str], words: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Each judged word's margins on the rows: (float32 [W, N], −inf where the readout has no
    concept of the word, and covered [W] bool, whether it has)."""
    index = {w: i for i, w in enumerate(readout_words)}
    out = np.full((len(words), len(word_margins)), -np.inf, dtype=np.float32)
    covered = np.array([w in index for w in words], dtype=bool)
    for i, word in enumerate(words):
        if word in index:
            out[i] = word_margins[:, index[word]]
    return out, covered
