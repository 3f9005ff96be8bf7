"""Naming CEDAR's concepts and the catalog of them: the vocabulary, the names, the entries.

Naming: each signed axis ±j of U is a direction ±(row j of U) in the embedding space (the
codes are z̃ = U(x − b), so this is the direction that raises the concept's activation). Its
candidate names are the vocabulary words of highest cosine with the centred text embeddings
t_w − b (`name_directions`: the best word, its cosine the score, the next words the
runner-ups). Where the rows carry captions, `name_by_data` then picks among the candidates by
what the concept does on captioned rows, one concept per name, and leaves a concept unnamed
(its label as its name) when its name does not hold up on the val rows (training.cedar.naming).
The vocabulary comes from the corpus (the clean nouns, adjectives and verbs of its captions,
`vocabulary_from_texts`) or from the user (one term per line).

The catalog: one entry per signed concept (2D entries), with its name, score, runner-ups, the
share of rows in which it is among the k active concepts (frequency), its top examples, and
the name's val precision and whether it is named; a readout word's entry (`word_entry`) is the
word, with its held-out precision. How entries are written to and read from an artifact:
`catalog_json`, `catalog_entry`. What reads them back, the coder: training.cedar.concepts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from training.cedar.caption_words import caption_vocabulary
from training.cedar.naming import (
    CANDIDATES,
    Cooccurrence,
    choose_names,
    pick_threshold,
    trusted,
    with_precision,
)
from training.cedar.sparse_codes import concept_ids, concept_label, sparse_codes
from training.core.errors import InputError
from training.core.metrics import unit_rows

RUNNER_UPS = 4
EXAMPLES = 5


def vocabulary_from_texts(texts: Iterable[str], min_count: int = 5) -> list[tuple[str, str]]:
    """(word, class) of the content words seen at least `min_count` times, most frequent first:
    the clean caption vocabulary of training.cedar.naming (stop words out, verb forms folded,
    misspellings merged)."""
    return caption_vocabulary(texts, min_count).terms()


def read_vocabulary(path: Path) -> list[tuple[str, str]]:
    """A user's vocabulary: one term per line (blank lines and # comments skipped)."""
    if not path.is_file():
        raise InputError(f"vocabulary file not found: {path}")
    terms = [line.strip() for line in path.read_text().splitlines()]
    terms = [t for t in terms if t and not t.startswith("#")]
    if not terms:
        raise InputError(f"vocabulary file {path} holds no terms")
    return [(t, "given") for t in dict.fromkeys(terms)]


@dataclass
class ConceptName:
    concept: int
    name: str
    score: float
    runner_ups: list[tuple[str, float]]
    precision: float | None = None  # P(name relevant | active) on held-out rows, where measured
    named: bool = True  # False: no name held up, `name` is the label


def signed_directions(rotation: np.ndarray) -> np.ndarray:
    """[2D, D]: row 2j is +(row j of U), row 2j + 1 its negation (the concept order)."""
    u = np.asarray(rotation, dtype=np.float64)
    directions = np.empty((2 * u.shape[0], u.shape[1]))
    directions[0::2], directions[1::2] = u, -u
    return directions


def name_directions(
    directions: np.ndarray,
    mean: np.ndarray,
    words: Sequence[str],
    word_embeddings: np.ndarray,
    runner_ups: int = RUNNER_UPS,
) -> list[ConceptName]:
    """Name each concept direction [C, D] by its best vocabulary word (cosine with t_w − b)."""
    d = np.asarray(directions, dtype=np.float64)
    t = np.asarray(word_embeddings, dtype=np.float64)
    if not words:
        raise InputError("the vocabulary is empty")
    if t.ndim != 2 or t.shape != (len(words), d.shape[1]):
        raise InputError(
            f"need one {d.shape[1]}-d embedding per vocabulary word ({len(words)}), got {t.shape}"
        )
    cos = direction_cosines(d, mean, t)
    best = np.argsort(-cos, axis=1)[:, : runner_ups + 1]
    return [
        ConceptName(
            concept=c,
            name=words[best[c, 0]],
            score=float(cos[c, best[c, 0]]),
            runner_ups=[(words[i], float(cos[c, i])) for i in best[c, 1:]],
        )
        for c in range(len(d))
    ]


def direction_cosines(
    directions: np.ndarray, mean: np.ndarray, word_embeddings: np.ndarray
) -> np.ndarray:
    """[C, W]: cosine of every concept direction with every centred word embedding t_w − b."""
    t = unit_rows(np.asarray(word_embeddings, dtype=np.float64) - mean, np.float64)
    return unit_rows(np.asarray(directions, dtype=np.float64), np.float64) @ t.T


def name_concepts(
    rotation: np.ndarray,
    mean: np.ndarray,
    words: Sequence[str],
    word_embeddings: np.ndarray,
    runner_ups: int = RUNNER_UPS,
) -> list[ConceptName]:
    """The best vocabulary word of every signed axis (2D concepts, ids 2j and 2j + 1)."""
    return name_directions(signed_directions(rotation), mean, words, word_embeddings, runner_ups)


def name_by_data(
    directions: np.ndarray,
    mean: np.ndarray,
    words: Sequence[str],
    word_embeddings: np.ndarray,
    train: Cooccurrence,
    val: Cooccurrence,
    signed: bool,
    threshold: float | None = None,
    candidates: int = CANDIDATES,
    runner_ups: int = RUNNER_UPS,
) -> tuple[list[ConceptName], dict[str, Any]]:
    """Names chosen by what each concept does on captioned rows (training.cedar.naming): the
    best-F1 cosine candidate on the train rows, one concept per name, both signs of an axis only
    when opposite, kept when its val precision reaches `threshold` (None: picked on the val
    rows). An unnamed concept's name is its label; `score` is the name's cosine (0 unnamed),
    the runner-ups the best cosine words. Also returns the threshold and its val curve."""
    cos = direction_cosines(directions, mean, word_embeddings)
    chosen = with_precision(choose_names(cos, train, signed, candidates), val)
    curve: dict[float, float] = {}
    if threshold is None:
        threshold, curve = pick_threshold(chosen, val)
    kept = trusted(chosen, threshold)
    best = np.argsort(-cos, axis=1)[:, :runner_ups]
    names = []
    for choice, found in zip(kept, chosen, strict=True):
        c = choice.concept
        names.append(
            ConceptName(
                concept=c,
                name=words[choice.word] if choice.word is not None else concept_label(c),
                score=float(cos[c, choice.word]) if choice.word is not None else 0.0,
                runner_ups=[(words[i], float(cos[c, i])) for i in best[c]],
                precision=found.precision,
                named=choice.word is not None,
            )
        )
    info = {
        "threshold": threshold,
        "val_utility": curve,
        "candidates": candidates,
        "named": sum(n.named for n in names),
    }
    return names, info


@dataclass
class CatalogEntry:
    concept: int
    label: str
    name: str
    score: float
    runner_ups: list[tuple[str, float]]
    frequency: float
    examples: list[dict[str, Any]] = field(default_factory=list)
    scope: str | None = None  # local / global, once CDS has measured it
    precision: float | None = None  # the name's precision on held-out rows (None: not measured)
    named: bool = True  # False: left unnamed, `name` is the label (found by label only)
    zero_shot: bool = False  # a word concept without labels: its text direction's cosine filter


def build_catalog(
    names: Sequence[ConceptName],
    rotation: np.ndarray,
    mean: np.ndarray,
    k: int,
    embeddings: np.ndarray,
    ids: Sequence[str],
    texts: Sequence[str] | None = None,
    examples: int = EXAMPLES,
) -> list[CatalogEntry]:
    """Catalog entries with frequency (share of rows where the concept is active at k) and the
    rows with the largest activation of each concept as examples."""
    axes, values = sparse_codes(embeddings, rotation, mean, k)
    active = concept_ids(axes, values).reshape(-1)
    frequency = np.bincount(active, minlength=len(names)) / len(embeddings)
    z = (np.asarray(embeddings, dtype=np.float32) - mean) @ np.asarray(rotation, np.float32).T
    entries = []
    for entry in names:
        axis, sign = entry.concept // 2, -1.0 if entry.concept % 2 else 1.0
        top = np.argsort(-sign * z[:, axis], kind="stable")[:examples]
        entries.append(
            CatalogEntry(
                concept=entry.concept,
                label=concept_label(entry.concept),
                name=entry.name,
                score=round(entry.score, 4),
                runner_ups=[(w, round(s, 4)) for w, s in entry.runner_ups],
                frequency=float(frequency[entry.concept]),
                precision=None if entry.precision is None else round(entry.precision, 4),
                named=entry.named,
                examples=[
                    {
                        "id": str(ids[i]),
                        "activation": round(float(sign * z[i, axis]), 4),
                        **({"text": str(texts[i])} if texts is not None else {}),
                    }
                    for i in top
                ],
            )
        )
    return entries


def word_entry(concept: int, record: dict[str, Any]) -> CatalogEntry:
    """The catalog entry of a readout word (training.cedar.readout.artifact.readout_record)."""
    word = str(record["word"])
    precision = record.get("precision")
    return CatalogEntry(
        concept=concept,
        label=word,
        name=word,
        score=0.0 if precision is None else float(precision),
        runner_ups=[],
        frequency=float(record.get("frequency", 0.0)),
        precision=None if precision is None else float(precision),
        named=True,
        zero_shot=bool(record.get("zero_shot", False)),
    )


def catalog_entry(data: dict[str, Any]) -> CatalogEntry:
    try:
        return CatalogEntry(
            concept=int(data["concept"]),
            label=str(data["label"]),
            name=str(data["name"]),
            score=float(data["score"]),
            runner_ups=[(str(w), float(s)) for w, s in data.get("runner_ups", [])],
            frequency=float(data.get("frequency", 0.0)),
            examples=list(data.get("examples", [])),
            scope=data.get("scope"),
            precision=None if data.get("precision") is None else float(data["precision"]),
            named=bool(data.get("named", True)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"malformed concept catalog entry {data!r}: {exc}") from exc


def catalog_json(entries: Sequence[CatalogEntry]) -> list[dict[str, Any]]:
    return [asdict(e) for e in entries]
