"""Concept-filter quality on a held-out captioned gallery, and the word embeddings and caption
relevance it (and naming) reads: the I/O around training.cedar.filter_quality's pure scoring.

`gallery_quality` scores every filter — each method's named concepts, the vocabulary readout's
word concepts and their ablations (training.cedar.readout.quality), a keyword match on the
row's own caption and a cosine threshold picked on the gallery's val rows — on the gallery's
test rows, with one metric code; `filter_quality_markdown` renders it for `strata eval cedar`.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from scipy import sparse

from training.cedar.caption_words import CaptionVocabulary, caption_vocabulary
from training.cedar.data import SplitRows, groups_of, load_split_rows
from training.cedar.evaluate import SparseMethod
from training.cedar.filter_quality import (
    NEUTRAL_QUERY,
    filter_quality,
    frequent_words,
    named_filters,
    naming_table,
    pick_cosine_threshold,
    quality_table,
)
from training.cedar.naming import cooccurrence, fires_matrix, naming_precision, word_relevance
from training.cedar.readout.quality import gallery_shift, readout_quality, served_quality
from training.cedar.readout.vocabulary import VocabularyReadout, text_directions
from training.core.artifacts import TransformArtifact
from training.core.encoders import shared_encoder
from training.core.errors import InputError
from training.core.metrics import unit_rows
from training.core.settings import load_settings

log = logging.getLogger(__name__)


def embed_words(words: list[str], spec: str | None) -> np.ndarray:
    """Text embeddings of words with the encoder `spec` (loaded once per process)."""
    if spec is None:
        raise InputError("the cache records no encoder: pass --encoder")
    log.info("embedding %d words with %s", len(words), spec)
    return shared_encoder(spec, load_settings().device).encode_text(words)


def caption_relevance(
    data: SplitRows, rows: np.ndarray, vocab: CaptionVocabulary
) -> sparse.csr_matrix | None:
    """Which words each row is relevant to (training.cedar.naming.word_relevance), judged by the
    other captions of its group (image); None when the cache has no captions."""
    if "caption" not in data.metadata.column_names:
        return None
    mentions = [vocab.mentions(t) for t in data.texts(rows)]
    return word_relevance(mentions, groups_of(data, rows), len(vocab.words))


def gallery_quality(
    gallery: Path,
    methods: list[SparseMethod],
    namings: dict[str, dict[str, list[str | None]]],
    k: int,
    encoder: str | None,
    readouts: tuple[TransformArtifact, dict[str, VocabularyReadout]] | None = None,
) -> dict[str, Any]:
    """Concept-filter quality (training.cedar.filter_quality) on the gallery's test rows: each
    method under each of its namings ("clean": the catalog's, "cosine": best cosine word over the
    raw vocabulary, the naming before the clean-up), a keyword match on the row's own caption,
    and a cosine threshold with the word's centred embedding (threshold picked on the gallery's
    val rows), each with P@10 of a filtered search for NEUTRAL_QUERY; `readouts`' word-concept
    filters (training.cedar.readout.quality) and, beside
    them, every word as a zero-shot concept (the cosine threshold a gallery without labels
    gets: the readout's training-corpus cut); the readout with one margin shift picked on the
    gallery's labelled val rows (training.cedar.readout.quality.gallery_shift: what the cosine
    threshold reads of the gallery, and no more); the filter as served with its open
    vocabulary (training.cedar.readout.quality.served_quality: the readout's rows, every other
    word zero-shot at μ + z·σ on the gallery), over all words and over learnt and zero-shot
    words apart; and every naming's precision on the test rows."""
    g = load_split_rows(gallery)
    if "caption" not in g.metadata.column_names:
        raise InputError(f"{gallery}: filter quality needs the gallery's captions")
    test, val = g.rows("test"), g.rows("val")
    judged = {split: judged_words(g, rows) for split, rows in (("test", test), ("val", val))}
    vocab, relevant, words = judged["test"]
    names = [vocab.words[w] for w in words]
    classes = [vocab.classes[w] for w in words]
    wanted = relevant[:, words].T.toarray().astype(bool)
    x = g.embeddings[test]
    neutral = unit_rows(embed_words([NEUTRAL_QUERY], encoder))[0]
    ranking = np.argsort(-(unit_rows(x) @ neutral), kind="stable")  # the filtered search's order
    scores: dict[str, Any] = {}
    naming: dict[str, Any] = {}
    for method in methods:
        active = method.concepts(x, k)
        n = len(method.directions)
        fires = fires_matrix(active, n).tocsc()
        test_cooccurrence = cooccurrence(active, relevant, n)
        for variant, concept_names in namings[method.name].items():
            label = method.name if variant == "clean" else f"{method.name} (cosine names)"
            allowed, covered = named_filters(fires, concept_names, names)
            scores[label] = filter_quality(allowed, covered, wanted, classes, ranking)
            naming[label] = naming_precision(concept_names, test_cooccurrence, vocab.words)
    if readouts is not None:
        scores.update(readout_quality(readouts[1], readouts[0], x, names, classes, wanted))
    mentions = [vocab.mentions(t) for t in g.texts(test)]
    own = np.array([[w in m for m in mentions] for w in words])
    everything = np.ones(len(words), dtype=bool)
    scores["keyword (own caption)"] = filter_quality(own, everything, wanted, classes, ranking)
    centre = g.embeddings[g.rows("train")].mean(axis=0)
    val_vocab, val_relevant, val_words = judged["val"]
    val_names = [val_vocab.words[w] for w in val_words]
    terms = sorted(set(names) | set(val_names))
    embedded = dict(zip(terms, embed_words(terms, encoder), strict=True))

    def cosines(rows: np.ndarray, of: list[str]) -> np.ndarray:
        t = unit_rows(np.array([embedded[w] for w in of], dtype=np.float64) - centre)
        return t @ unit_rows(g.embeddings[rows].astype(np.float64) - centre).T

    threshold, curve = pick_cosine_threshold(
        cosines(val, val_names), val_relevant[:, val_words].T.toarray().astype(bool)
    )
    allowed = cosines(test, names) >= threshold
    scores[f"cosine ≥ {threshold:.2f}"] = filter_quality(
        allowed, everything, wanted, classes, ranking
    )
    if readouts is not None:
        trained_readout = next(iter(readouts[1].values()))  # the artifact's, as trained
        val_wanted = val_relevant[:, val_words].T.toarray().astype(bool)
        shift, quality = gallery_shift(
            trained_readout,
            readouts[0],
            (g.embeddings[val], val_names, val_wanted),
            (x, names, classes, wanted),
        )
        scores[f"word concepts, margin ≥ {shift:+.1f} picked on the gallery's val"] = quality
    trained = readouts[0].extra["readout"].get("training", {}) if readouts is not None else {}
    if readouts is not None and "zero_shot_cut" in trained:
        cedar, cut = readouts[0], float(trained["zero_shot_cut"])
        t = text_directions(np.array([embedded[w] for w in names]), cedar.mean)
        allowed = (unit_rows(np.asarray(x, np.float32) - cedar.mean) @ t.T >= cut).T
        label = f"zero-shot cosine ≥ {cut:.2f} (the training corpus's cut, no gallery labels)"
        scores[label] = filter_quality(allowed, everything, wanted, classes)
    if readouts is not None:
        cedar, trained_readout = readouts[0], next(iter(readouts[1].values()))
        t = text_directions(np.array([embedded[w] for w in names]), cedar.mean)
        scores.update(
            served_quality(
                trained_readout,
                cedar,
                x,
                names,
                classes,
                wanted,
                t,
                lambda words: embed_words(words, encoder),
                ranking,
            )
        )
    return {
        "gallery": str(gallery),
        "test_rows": len(test),
        "k": k,
        "words": dict(Counter(classes)),
        "word_list": dict(zip(names, classes, strict=True)),
        "cosine_threshold": threshold,
        "cosine_val_f1": curve,
        "methods": scores,
        "naming": naming,
    }


def judged_words(
    g: SplitRows, rows: np.ndarray
) -> tuple[CaptionVocabulary, sparse.csr_matrix, np.ndarray]:
    """The rows' own clean vocabulary, their relevance and its frequent words."""
    vocab = caption_vocabulary(g.texts(rows), min_count=5)
    relevant = caption_relevance(g, rows, vocab)
    if relevant is None:
        raise InputError("filter quality needs the gallery's captions")
    return vocab, relevant, frequent_words(relevant, vocab.classes)


def filter_quality_markdown(quality: dict[str, Any]) -> str:
    words = {**quality["words"], "all": sum(quality["words"].values())}
    return "\n".join(
        [
            f"## Concept-filter quality on {quality['gallery']} "
            f"(test, {quality['test_rows']} rows)",
            "",
            "Macro precision / recall per word class of the rows each filter allows (a row is "
            "relevant when at least 2 other captions of its image use the word); a word with "
            "no concept of its name scores 0 / 0; covered: words with a filter. "
            f"k = {quality['k']}; the cosine threshold was picked on the val rows.",
            "",
            quality_table(quality["methods"], words),
            "## Naming precision on the test rows",
            "",
            "P(name relevant | concept active), mean over the named concepts active on the rows.",
            "",
            naming_table(quality["naming"]),
        ]
    )
