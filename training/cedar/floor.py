"""The floor on held-out precision a concept needs to be shown, picked on dev, and explanation
precision, the figure it is picked by.

What a reader is shown of a row (a hit's concept list, `ConceptCoder.shown`): its active word
concepts and its k axis concepts, only those that hold (named, held-out precision ≥ the floor),
one entry per name, the strongest `limit` of them. Judged against the row's image:

    used(row, name)          = at least `others` *other* captions of the row's image use the
                               name (training.cedar.naming.word_relevance; 1 by default)
    explanation precision    = mean over the rows shown a concept of
                               |{shown names used}| / |{shown names}|
    utility(floor)           = Σ over (row, shown name) of +1 if used, −1 if not

The floor is picked as the naming threshold is (training.cedar.naming.shown_utility): the one
of greatest utility on the dev (val) rows, from THRESHOLDS (ties: the lower floor, showing
more), so a concept is shown where showing it is right more often than wrong. It is recorded
in the CEDAR artifact (`extra["floor"]`), where `ConceptCoder` reads it: at fit time
(training/cedar/fit.py) or for an existing artifact by `strata train floor`. Pure functions
but `floor_rows` and `dev_floor`, which read the rows' codes through the coder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from training.cedar.caption_words import caption_vocabulary
from training.cedar.concepts import ConceptCoder
from training.cedar.data import SplitRows, groups_of
from training.cedar.naming import THRESHOLDS, word_relevance
from training.core.artifacts import TransformArtifact
from training.core.errors import InputError

OTHER_CAPTIONS = 1  # "the image's other captions use it": at least one of them
SHOWN = 5  # a hit's concept list (service.engine.scoring.EngineConfig.hit_concepts)


@dataclasses.dataclass
class FloorRows:
    """Rows to judge explanations on: their codes (word concepts then axis concepts, ids and
    values) and, per row, the words its image's other captions use."""

    codes: list[tuple[np.ndarray, np.ndarray]]
    used: list[frozenset[str]]


def used_words(texts: Sequence[str], groups: Sequence[str], others: int) -> list[frozenset[str]]:
    """Per row: the caption words (training.cedar.naming's vocabulary of these captions, every
    word seen once or more) used by at least `others` other captions of its group."""
    vocab = caption_vocabulary(texts, min_count=1)
    relevant = word_relevance([vocab.mentions(t) for t in texts], groups, len(vocab.words), others)
    bounds = relevant.indptr
    return [
        frozenset(vocab.words[j] for j in relevant.indices[bounds[r] : bounds[r + 1]])
        for r in range(len(texts))
    ]


def floor_rows(
    coder: ConceptCoder,
    embeddings: np.ndarray,
    texts: Sequence[str],
    groups: Sequence[str],
    others: int = OTHER_CAPTIONS,
) -> FloorRows:
    """The rows' codes as a hit's concept list reads them (its active word concepts, then its
    k axis concepts) and the words their images' other captions use."""
    axes, values = coder.encode(embeddings)
    words = coder.active_words(embeddings)
    codes = [
        (np.concatenate([w[0], a]), np.concatenate([w[1], v]).astype(np.float32))
        for w, a, v in zip(words, axes, values, strict=True)
    ]
    return FloorRows(codes, used_words(texts, groups, others))


def shown_names(coder: ConceptCoder, rows: FloorRows, limit: int | None = SHOWN) -> list[list[str]]:
    """Per row: the names a reader is shown (`ConceptCoder.shown`, at the coder's floor; the
    strongest `limit`, None: all)."""
    return [
        [coder.catalog[c].name for c, _ in coder.shown(ids, values, limit)]
        for ids, values in rows.codes
    ]


def explanation_precision(
    shown: Sequence[Sequence[str]], used: Sequence[frozenset[str]]
) -> dict[str, float]:
    """The module doc's figures for rows shown these names: explanation precision (mean over
    rows shown any), the pooled share of shown names used, the share of rows shown any, the
    mean names shown, and the utility (used − not used)."""
    right_by_row = [sum(n in u for n in names) for names, u in zip(shown, used, strict=True)]
    per_row = [r / len(names) for r, names in zip(right_by_row, shown, strict=True) if names]
    right = sum(right_by_row)
    total = sum(len(names) for names in shown)
    return {
        "explanation_precision": float(np.mean(per_row)) if per_row else 0.0,
        "pooled_precision": right / total if total else 0.0,
        "rows_shown": len(per_row) / max(len(shown), 1),
        "mean_shown": total / max(len(shown), 1),
        "utility": float(2 * right - total),
    }


def floor_curve(
    coder: ConceptCoder,
    rows: FloorRows,
    floors: Sequence[float] = THRESHOLDS,
    limit: int = SHOWN,
) -> dict[float, dict[str, float]]:
    """Explanation figures at every floor."""
    return {
        float(f): explanation_precision(shown_names(coder.at_floor(f), rows, limit), rows.used)
        for f in floors
    }


def pick_floor(curve: dict[float, dict[str, float]]) -> float:
    """The floor of greatest utility (ties: the lower floor)."""
    return max(curve, key=lambda f: (curve[f]["utility"], -f))


def floor_record(
    curve: dict[float, dict[str, float]], picked_on: str, others: int, limit: int
) -> dict[str, Any]:
    """What the artifact records (`extra["floor"]`): the floor, how and where it was picked."""
    floor = pick_floor(curve)
    return {
        "value": floor,
        "picked_on": picked_on,
        "rule": "greatest utility: +1 per shown name the image's other captions use, −1 per "
        "one they do not",
        "other_captions": others,
        "shown": limit,
        "at_floor": curve[floor],
        "curve": {str(f): round(v["utility"], 1) for f, v in curve.items()},
    }


def dev_floor(
    artifact: TransformArtifact,
    data: SplitRows,
    source: str,
    others: int = OTHER_CAPTIONS,
    limit: int = SHOWN,
) -> dict[str, Any]:
    """The floor record of a CEDAR artifact, picked on the val rows of `data` (a captioned
    cache, named `source` in the record)."""
    if "caption" not in data.metadata.column_names:
        raise InputError(f"{source} has no captions: a floor is picked against them")
    rows = data.rows("val")
    coder = ConceptCoder(artifact)
    judged = floor_rows(
        coder, data.embeddings[rows], data.texts(rows), groups_of(data, rows), others
    )
    curve = floor_curve(coder, judged, limit=limit)
    return floor_record(curve, f"the val rows of {source} ({len(rows)})", others, limit)
