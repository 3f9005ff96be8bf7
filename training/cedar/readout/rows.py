"""The rows a vocabulary readout learns from, read off a captioned cache's train and val split.

For the words of the train captions' clean vocabulary (training.cedar.naming, at least
`vocabulary_min_count` occurrences): the readout input x̃ of every train and val row, the soft
training targets and the strict relevance (training.cedar.readout), and the val rows' split
into a calibration half and a held-out half, by image; which words each train row's own
caption uses (training.cedar.readout.discriminant). With `zero_shot`, the words the train
captions use too rarely, and the caption lexicon's words they never use, join as zero-shot
concepts (training.cedar.readout: the cosine filter of their text direction).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from training.cedar.caption_words import CaptionVocabulary, caption_vocabulary, lexicon_terms
from training.cedar.data import SplitRows, groups_of
from training.cedar.naming import OTHER_CAPTIONS, word_relevance
from training.cedar.readout.cuts import calibration_sample, split_calibration
from training.cedar.readout.discriminant import mention_matrix
from training.cedar.readout.fitting import fit_readout
from training.cedar.readout.vocabulary import (
    SOFT_LEVELS,
    ReadoutConfig,
    ReadoutRows,
    VocabularyReadout,
    active_share,
    cosine_cut,
    readout_input,
    soft_targets,
    text_directions,
    with_zero_shot,
    zero_shot_z,
)
from training.core.errors import InputError


def readout_rows(
    data: SplitRows,
    vocab: CaptionVocabulary,
    word_embeddings: np.ndarray,
    rotation: np.ndarray,
    mean: np.ndarray,
    k: int,
    config: ReadoutConfig,
) -> ReadoutRows:
    """ReadoutRows of the cache's train and val rows (module doc); refuses a cache without
    captions, which gives no labels."""
    if "caption" not in data.metadata.column_names:
        raise InputError("a vocabulary readout learns from captions: the cache has none")
    parts = {}
    for split in ("train", "val"):
        rows = data.rows(split)
        groups = groups_of(data, rows)
        mentions = [vocab.mentions(t) for t in data.texts(rows)]
        levels = {n: word_relevance(mentions, groups, len(vocab.words), n) for n in SOFT_LEVELS}
        x = readout_input(data.embeddings[rows], config.source, rotation, mean, k)
        parts[split] = (x, soft_targets(list(levels.values())), levels[OTHER_CAPTIONS], groups)
        if split == "train":
            train_mentions = mention_matrix(mentions, len(vocab.words))
    train_x, train_targets, train_strict, _ = parts["train"]
    sample = calibration_sample(len(train_x), config.seed)
    val_x, val_targets, val_strict, val_groups = parts["val"]
    return ReadoutRows(
        words=list(vocab.words),
        classes=list(vocab.classes),
        word_embeddings=np.asarray(word_embeddings, dtype=np.float32),
        train_x=train_x,
        train_targets=train_targets,
        train_mentions=train_mentions,
        train_support=np.asarray(train_strict.sum(axis=0)).reshape(-1).astype(np.int64),
        train_sample=sample,
        train_relevant=train_strict[sample].toarray().astype(bool),
        val_x=val_x,
        val_targets=val_targets,
        val_relevant=val_strict.toarray().astype(bool),
        calibration=split_calibration(val_groups, config.seed),
    )


def vocabulary_rows(
    data: SplitRows,
    rotation: np.ndarray,
    mean: np.ndarray,
    k: int,
    embed: Callable[[list[str]], np.ndarray],
    config: ReadoutConfig,
) -> tuple[CaptionVocabulary, ReadoutRows]:
    """The clean vocabulary of the train captions and its ReadoutRows, the words embedded by
    `embed`; refuses captions that give no vocabulary."""
    vocab = caption_vocabulary(data.texts(data.rows("train")), config.vocabulary_min_count)
    if not vocab.words:
        raise InputError("the train captions give no vocabulary for a readout")
    return vocab, readout_rows(data, vocab, embed(list(vocab.words)), rotation, mean, k, config)


def learn_readout(
    data: SplitRows,
    rotation: np.ndarray,
    mean: np.ndarray,
    k: int,
    embed: Callable[[list[str]], np.ndarray],
    config: ReadoutConfig,
    progress: bool = True,
) -> tuple[VocabularyReadout, dict[str, Any]]:
    """The vocabulary of the train captions, embedded by `embed`, then `fit_readout`."""
    vocab, rows = vocabulary_rows(data, rotation, mean, k, embed, config)
    readout, info = fit_readout(rows, mean, config, progress)
    if not config.zero_shot:
        return readout, info
    extra = zero_shot_terms(data.texts(data.rows("train")), vocab)
    cut = cosine_cut(
        rows.val_x,
        text_directions(rows.word_embeddings, mean),
        rows.val_relevant,
        config.min_calibration,
    )
    if extra:
        words = [w for w, _ in extra]
        directions = text_directions(embed(words), mean)
        readout = with_zero_shot(readout, words, [c for _, c in extra], directions, cut)
        readout.frequency = active_share(readout, rows.train_x)
    z = zero_shot_z(rows.val_x, text_directions(rows.word_embeddings, mean), cut)
    return readout, {
        **info,
        "zero_shot_words": len(extra),
        "zero_shot_cut": round(cut, 6),
        "zero_shot_z": round(z, 6),  # τ in standard units: service/engine/open_vocabulary.py
    }


def zero_shot_terms(texts: list[str], trained: CaptionVocabulary) -> list[tuple[str, str]]:
    """(word, class) of the zero-shot words (module doc): the clean words of `texts` the trained
    vocabulary lacks (a token it reads as one of its own words — a merged typo — left out),
    most frequent first, then the lexicon's words that neither has, in sorted order."""
    seen = caption_vocabulary(texts, min_count=1)
    have = set(trained.words)
    terms = [(w, c) for w, c in seen.terms() if w not in have and w not in trained.forms]
    have |= {w for w, _ in terms}
    lexicon = sorted(lexicon_terms().terms())
    terms += [(w, c) for w, c in lexicon if w not in have and w not in trained.forms]
    return terms
