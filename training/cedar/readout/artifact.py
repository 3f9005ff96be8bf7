"""A vocabulary readout (training/cedar/readout/vocabulary.py) as the CEDAR artifact stores it:
its words and figures in the manifest's `extra["readout"]`, its tensors beside the rotation in
the weights file (`readout.weight`, `readout.offset`, and `readout.text`, each word's unit text
direction, which artifacts written before lack)."""

from __future__ import annotations

from typing import Any

import numpy as np

from training.cedar.gallery_trust import neighbourhoods
from training.cedar.readout.vocabulary import VocabularyReadout
from training.core.errors import InputError

WEIGHT, OFFSET = "readout.weight", "readout.offset"  # tensors in the CEDAR artifact
TEXT = "readout.text"  # the words' unit text directions t̃_w (absent in older artifacts)
NEIGHBOURS = "readout.neighbours"  # each word's nearest words by t̃_w (absent in older ones)


def readout_tensors(readout: VocabularyReadout) -> dict[str, np.ndarray]:
    """The readout's tensors, for the CEDAR artifact's weights file: with its text directions,
    each word's neighbourhood among them (training.cedar.gallery_trust), measured once here."""
    if readout.text is None:
        return {WEIGHT: readout.weight, OFFSET: readout.offset}
    return {
        WEIGHT: readout.weight,
        OFFSET: readout.offset,
        TEXT: readout.text,
        NEIGHBOURS: word_neighbours(readout).astype(np.int32),
    }


def word_neighbours(readout: VocabularyReadout) -> np.ndarray:
    """int64 [V, NEIGHBOURS]: each word's nearest words (training.cedar.gallery_trust): the
    artifact's, else measured from its text directions (a V × V pass); [V, 0] without them."""
    if readout.neighbours is not None:
        return np.asarray(readout.neighbours, dtype=np.int64)
    if readout.text is None:
        return np.zeros((len(readout.words), 0), dtype=np.int64)
    return neighbourhoods(readout.text)


def readout_record(readout: VocabularyReadout) -> dict[str, Any]:
    """The readout's words and figures, for the CEDAR artifact's manifest (`extra["readout"]`)."""
    return {
        "source": readout.source,
        "words": [
            {
                "word": w,
                "class": c,
                "threshold": round(float(t), 6),
                "own_threshold": bool(o),
                "precision": p,
                "recall": r,
                "support": s,
                "frequency": f,
                **({"zero_shot": True} if z else {}),
            }
            for w, c, t, o, p, r, s, f, z in zip(
                readout.words,
                readout.classes,
                readout.threshold,
                readout.own_threshold,
                readout.precision,
                readout.recall,
                readout.support,
                readout.frequency or [0.0] * len(readout.words),
                readout.zero_shot or [False] * len(readout.words),
                strict=True,
            )
        ],
    }


def readout_of(
    record: dict[str, Any] | None, tensors: dict[str, np.ndarray]
) -> VocabularyReadout | None:
    """The readout stored in an artifact (`extra["readout"]` and its tensors); None for an
    artifact made before readouts (its concepts are its axes alone)."""
    if record is None:
        return None
    if WEIGHT not in tensors or OFFSET not in tensors:
        raise InputError(f"the artifact's vocabulary lacks its tensors {WEIGHT}, {OFFSET}")
    try:
        words = record["words"]
        return VocabularyReadout(
            words=[str(w["word"]) for w in words],
            classes=[str(w["class"]) for w in words],
            weight=np.asarray(tensors[WEIGHT], dtype=np.float32),
            offset=np.asarray(tensors[OFFSET], dtype=np.float32),
            threshold=np.array([float(w["threshold"]) for w in words], dtype=np.float32),
            own_threshold=np.array([bool(w["own_threshold"]) for w in words]),
            precision=[None if w["precision"] is None else float(w["precision"]) for w in words],
            recall=[None if w["recall"] is None else float(w["recall"]) for w in words],
            support=[int(w["support"]) for w in words],
            source=str(record.get("source", "dense")),
            frequency=[float(w.get("frequency", 0.0)) for w in words],
            zero_shot=[bool(w.get("zero_shot", False)) for w in words],
            text=np.asarray(tensors[TEXT], dtype=np.float32) if TEXT in tensors else None,
            neighbours=np.asarray(tensors[NEIGHBOURS]) if NEIGHBOURS in tensors else None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"malformed vocabulary in the CEDAR artifact: {exc}") from exc
