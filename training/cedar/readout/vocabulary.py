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
the trainer is in training/cedar/readout/fitting.py, so that reading a readout loads no
torch).

With `discriminant` (the default) each word's logit is then added, in standard units, to its
discriminant direction from the rows whose own caption uses it
(training/cedar/readout/discriminant.py): still one weight row and offset per word.

Thresholds θ_w are picked per word on the train and val rows, and each word's held-out
precision and recall measured, in training/cedar/readout/cuts.py.

Zero-shot words. A word the training captions use too rarely to learn from (fewer than
`vocabulary_min_count` times, or never: the caption lexicon's words) is still a concept, the
cosine filter of its text direction: margin_w = ⟨x̃, t̃_w⟩ − τ, with t̃_w = (t_w − b)/‖t_w − b‖
and τ the one cut of best mean F1 on the val rows over the learnt words' own text directions
(`cosine_cut`). It has no held-out precision, and says so. On a gallery the service cuts any
word outside the learnt ones at μ + z·σ of its own scores there, raised until the bulk of those
scores accounts for at most NULL_FDR of the rows kept (training/cedar/gallery_cuts.py; the rule
in service/engine/open_vocabulary.py). The artifact also keeps every word's t̃_w (`text`), so that
an index build measures what the service's zero-shot cuts read on its gallery without an encoder
(indexer/vocabulary/). How an artifact stores a readout: training/cedar/readout/artifact.py. Pure
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
from training.cedar.readout.cuts import global_cut
from training.cedar.readout.discriminant import SHRINKAGE
from training.cedar.sparse_codes import reconstruct
from training.core.config import ConfigModel
from training.core.errors import InputError
from training.core.metrics import unit_rows

SOFT_LEVELS = (1, 2, 3)  # soft target: mean of "at least n other captions use the word"


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
    discriminant: bool = Field(
        True,
        description="add each word's discriminant direction, from the rows whose own caption "
        "uses it, to the logistic readout in standard units (training/cedar/readout/"
        "discriminant.py)",
    )
    shrinkage: float = Field(
        SHRINKAGE, gt=0, le=1, description="λ: the discriminant's covariance shrunk towards σ²I"
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
    # int32 [V, m]: each word's nearest words by t̃ (training.cedar.gallery_trust.neighbourhoods);
    # None in older artifacts (measured from `text` where needed)
    neighbours: np.ndarray | None = None

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
        if self.neighbours is not None and len(self.neighbours) != v:
            raise InputError(
                f"readout of {v} words has neighbourhoods for {len(self.neighbours)} words"
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
        neighbours=None,  # the words changed: measured again when the artifact is written
    )


def active_share(readout: VocabularyReadout, features: np.ndarray) -> list[float]:
    """Per word: the share of rows x̃ where its margin is ≥ 0 (in chunks of 8,192 rows)."""
    active = np.zeros(len(readout.words), dtype=np.int64)
    for start in range(0, len(features), 8192):
        chunk = features[start : start + 8192]
        active += (margins(chunk, readout.weight, readout.offset) >= 0).sum(0)
    return [round(float(a) / max(len(features), 1), 6) for a in active]


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
    train_mentions: Any  # scipy csr float32 [N, V]: the row's own caption uses the word
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
