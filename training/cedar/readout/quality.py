"""Concept-filter quality of vocabulary readouts, and the ablations beside them.

`strata eval cedar --gallery` scores every filter with one metric code
(training.cedar.filter_quality). For a CEDAR artifact with a vocabulary readout
(training.cedar.readout) it adds the readout's own filter ("require the word concept w": rows
whose margin is ≥ 0) and two ablations, each trained and calibrated on the `--cache` rows only:
- one global threshold for every word instead of per-word thresholds (the same weights);
- the readout trained from the other input: from the dense vector x against from CEDAR's
  sparse code (its reconstruction at k), the code being what Explain shows.

`gallery_shift` is the same-information comparison for the cosine threshold picked on the
gallery's labelled val rows: the readout's thresholds moved by one margin shift δ, picked on
those same rows with the same code (training.cedar.filter_quality.pick_cosine_threshold), so
both filters read exactly one number from the gallery's labels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from training.cedar.data import SplitRows
from training.cedar.filter_quality import filter_quality, pick_cosine_threshold
from training.cedar.gallery_cuts import (
    GATE_Z,
    NULL_FDR,
    agreeing_z,
    cut_in_standard_units,
    gate_passes,
    hub_scores,
    hub_words,
    zero_shot_cuts,
)
from training.cedar.readout.rows import learn_readout
from training.cedar.readout.vocabulary import (
    ReadoutConfig,
    VocabularyReadout,
    active_on,
    calibration_words,
    margins,
    named_margins,
    readout_input,
    teacher_words,
    text_directions,
)
from training.core.artifacts import TransformArtifact
from training.core.metrics import unit_rows

MARGIN_SHIFTS = tuple(round(t, 2) for t in np.arange(-4.0, 4.01, 0.1))  # δ, in logits


def with_global_threshold(readout: VocabularyReadout, threshold: float) -> VocabularyReadout:
    """The same readout with one threshold θ for every learnt word: offset = c − θ (zero-shot
    words, on the cosine scale, keep theirs)."""
    learnt = ~np.array([readout.is_zero_shot(w) for w in range(len(readout.words))], dtype=bool)
    logit_offset = readout.offset + readout.threshold
    return dataclasses.replace(
        readout,
        offset=np.where(learnt, logit_offset - np.float32(threshold), readout.offset).astype(
            np.float32
        ),
        threshold=np.where(learnt, np.float32(threshold), readout.threshold).astype(np.float32),
        own_threshold=np.zeros_like(readout.own_threshold),
    )


def readout_variants(
    cedar: TransformArtifact,
    readout: VocabularyReadout,
    data: SplitRows,
    embed: Callable[[list[str]], np.ndarray],
    progress: bool = True,
) -> dict[str, VocabularyReadout]:
    """The artifact's readout and its ablations (module doc), by label."""
    record = cedar.extra["readout"]
    config = ReadoutConfig.model_validate(record.get("config", {}))
    k = int(cedar.extra.get("k", 32))
    other = "code" if readout.source == "dense" else "dense"
    retrained, _ = learn_readout(
        data,
        cedar.rotation,
        cedar.mean,
        k,
        embed,
        config.model_copy(update={"source": other}),
        progress,
    )
    overall = float(record.get("training", {}).get("global_threshold", 0.0))
    return {
        f"CEDAR word concepts ({readout.source}, per-word θ)": readout,
        f"CEDAR word concepts ({readout.source}, one global θ)": with_global_threshold(
            readout, overall
        ),
        f"CEDAR word concepts ({other}, per-word θ)": retrained,
    }


def readout_quality(
    variants: dict[str, VocabularyReadout],
    cedar: TransformArtifact,
    x: np.ndarray,
    words: Sequence[str],
    classes: Sequence[str],
    wanted: np.ndarray,
) -> dict[str, dict[str, Any]]:
    """filter_quality of every variant on rows x for the judged `words`."""
    out = {}
    for label, readout in variants.items():
        scores, covered = word_margins(readout, cedar, x, words)
        out[label] = filter_quality(scores >= 0, covered, wanted, classes)
    return out


def word_margins(
    readout: VocabularyReadout, cedar: TransformArtifact, x: np.ndarray, words: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Each judged word's margins on rows x ([W, N], −inf where uncovered) and covered [W]."""
    features = readout_input(
        x, readout.source, cedar.rotation, cedar.mean, int(cedar.extra.get("k", 32))
    )
    return named_margins(margins(features, readout.weight, readout.offset), readout.words, words)


def gallery_shift(
    readout: VocabularyReadout,
    cedar: TransformArtifact,
    val: tuple[np.ndarray, Sequence[str], np.ndarray],
    test: tuple[np.ndarray, Sequence[str], Sequence[str], np.ndarray],
) -> tuple[float, dict[str, Any]]:
    """δ of best macro F1 on the gallery's labelled val rows (`val`: rows, judged words, their
    relevance [W, N]) and filter_quality on its test rows (`test`: rows, words, classes,
    relevance) of "margin ≥ δ" (module doc)."""
    val_x, val_words, val_relevant = val
    scores, _ = word_margins(readout, cedar, val_x, val_words)
    shift, _ = pick_cosine_threshold(scores, val_relevant, MARGIN_SHIFTS)
    x, words, classes, wanted = test
    scores, covered = word_margins(readout, cedar, x, words)
    return shift, filter_quality(scores >= shift, covered, wanted, classes)


def served_z(
    readout: VocabularyReadout,
    cedar: TransformArtifact,
    x: np.ndarray,
    embed: Callable[[list[str]], np.ndarray],
) -> float:
    """z of the open vocabulary on rows x as the service picks it
    (service/engine/open_vocabulary.py): taught by the learnt words' filters on these rows
    (training.cedar.gallery_cuts.agreeing_z), else the artifact's `zero_shot_z`, else measured on
    these rows from the readout's zero-shot words."""
    features = unit_rows(np.asarray(x, dtype=np.float32) - cedar.mean)
    learnt = np.array([w for w in range(len(readout.words)) if not readout.is_zero_shot(w)])
    if len(learnt):
        active = word_active(readout, cedar, x, learnt)
        counts = np.zeros(len(readout.words), dtype=np.int64)
        counts[learnt] = active.sum(axis=0)
        teachers = teacher_words(readout, counts, len(x))
        if len(teachers):
            column = {w: i for i, w in enumerate(learnt)}
            directions = text_directions(embed([readout.words[w] for w in teachers]), cedar.mean)
            taught = agreeing_z(features @ directions.T, active[:, [column[w] for w in teachers]])
            if taught is not None:
                return taught
    recorded = cedar.extra.get("readout", {}).get("training", {}).get("zero_shot_z")
    if recorded is not None:
        return float(recorded)
    picked, cut = calibration_words(readout)
    if not len(picked):
        return 0.0
    return cut_in_standard_units(features @ readout.weight[picked].T, cut)


def word_active(
    readout: VocabularyReadout, cedar: TransformArtifact, x: np.ndarray, words: np.ndarray
) -> np.ndarray:
    """bool [N, W]: where each of the readout's `words` is active on rows x (margin ≥ 0)."""
    k = int(cedar.extra.get("k", 32))
    return active_on(readout, x, cedar.rotation, cedar.mean, k, words)


def served_quality(
    readout: VocabularyReadout,
    cedar: TransformArtifact,
    x: np.ndarray,
    words: Sequence[str],
    classes: Sequence[str],
    wanted: np.ndarray,
    directions: np.ndarray,
    embed: Callable[[list[str]], np.ndarray],
    ranking: np.ndarray | None = None,
) -> dict[str, dict[str, Any]]:
    """The concept filter as the service runs it on rows x (no gallery labels): a word the
    readout learnt reads its learnt row, gated by its text direction (training.cedar.gallery_cuts:
    its corrected score at μ + GATE_Z·σ), any other word (the readout's zero-shot words too) its
    text direction t̃ (`directions` [W, D]), its scores less each row's hub value (over the
    readout's words), cut at μ + z·σ of them on these rows and raised to their null, z taught
    there by the learnt words (service/engine/open_vocabulary.py); every word, then the
    readout's learnt words and the others apart, with P@10 where `ranking` (the rows in a
    neutral query's order) is given. Beside it, every word at μ + z·σ, and z itself."""
    scores, _ = word_margins(readout, cedar, x, words)
    index = {w: i for i, w in enumerate(readout.words)}
    learnt = np.array([w in index and not readout.is_zero_shot(index[w]) for w in words])
    features = unit_rows(np.asarray(x, dtype=np.float32) - cedar.mean)
    z = served_z(readout, cedar, x, embed)
    hubs = np.zeros(len(features), dtype=np.float32)  # too few words to read hubness from
    if vocabulary := hub_words(readout.words, readout.frequency):
        hubs = hub_scores(features, text_directions(embed(vocabulary), cedar.mean))
    open_scores = features @ np.asarray(directions, dtype=np.float32).T - hubs[:, None]  # [N, W]
    standardised = (open_scores >= zero_shot_cuts(open_scores, z)).T
    gate = open_scores.mean(axis=0) + GATE_Z * open_scores.std(axis=0)
    gated = (scores >= 0) & gate_passes(open_scores, gate).T
    allowed = np.where(learnt[:, None], gated, standardised)
    everything, labels = np.ones(len(words), dtype=bool), np.asarray(classes)
    label = (
        f"as served: readout row gated at μ + {GATE_Z:g}σ, else zero-shot μ + {z:.2f}σ less "
        f"hubness, null q {NULL_FDR}"
    )
    out = {label: filter_quality(allowed, everything, wanted, classes, ranking)}
    for part, mask in (("learnt words", learnt), ("other words (zero-shot)", ~learnt)):
        if mask.any():
            out[f"{label}: {part}"] = filter_quality(
                allowed[mask], everything[mask], wanted[mask], labels[mask], ranking
            )
    out[f"every word zero-shot at μ + {z:.2f}σ less hubness, null q {NULL_FDR}"] = filter_quality(
        standardised, everything, wanted, classes
    )
    return out
