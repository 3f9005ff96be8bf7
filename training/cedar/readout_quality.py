"""Concept-filter quality of vocabulary readouts, and the ablations beside them.

`strata eval cedar --gallery` scores every filter with one metric code
(training.cedar.filter_quality). For a CEDAR artifact with a vocabulary readout
(training.cedar.readout) it adds the readout's own filter ("require the word concept w": rows
whose margin is ≥ 0) and two ablations, each trained and calibrated on the `--cache` rows only:
- one global threshold for every word instead of per-word thresholds (the same weights);
- the readout trained from the other input: from the dense vector x against from CEDAR's
  sparse code (its reconstruction at k), the code being what Explain shows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from training.cedar.data import SplitRows
from training.cedar.filter_quality import filter_quality
from training.cedar.readout import (
    ReadoutConfig,
    VocabularyReadout,
    margins,
    readout_input,
    word_filters,
)
from training.cedar.readout_rows import learn_readout
from training.core.artifacts import TransformArtifact


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
        data, cedar.rotation, cedar.mean, k, embed, config.model_copy(update={"source": other}),
        progress,
    )  # fmt: skip
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
    k = int(cedar.extra.get("k", 32))
    out = {}
    for label, readout in variants.items():
        features = readout_input(x, readout.source, cedar.rotation, cedar.mean, k)
        allowed, covered = word_filters(
            margins(features, readout.weight, readout.offset), readout.words, words
        )
        out[label] = filter_quality(allowed, covered, wanted, classes)
    return out
