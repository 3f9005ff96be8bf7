"""Concept names that survive a second look: a clean caption vocabulary, names chosen by what a
concept does on captioned rows, and each name's precision on held-out rows.

The vocabulary the names are drawn from: training.cedar.caption_words.

Relevance (`word_relevance`): a row is relevant to a word when at least `OTHER_CAPTIONS` other
captions of its image use the word, judged without the row's own caption (Flickr8k: five
captions per image); a corpus with one caption per group (the compositional corpus, whose
captions are true by construction) is judged by the row's own caption.

Naming (`data_names`): for a concept c and word w, on rows where c is among the k active
concepts, precision P(w relevant | c active) and recall P(c active | w relevant).
  1. candidates: the `CANDIDATES` words of highest cosine with the concept's direction (the
     centred word embeddings t_w − b, as before);
  2. each concept takes its candidate of best F1 on the TRAIN rows, one concept per name: the
     (concept, word) pairs are taken in decreasing F1, a word already given is skipped;
  3. both signs of an axis keep their names only when they mean opposite things: the two signs'
     word sets (their `WORD_SET` words of best F1) are disjoint and each sign's name is rarer
     than its base rate on the other sign's rows; otherwise the weaker sign is left unnamed;
  4. the name's precision on the VAL rows is stored; below `threshold` the concept is left
     unnamed (its label, "+12", is its name). `pick_threshold` chooses the threshold on the
     val rows: the one of greatest `shown_utility` — every (row, active named concept) pair
     +1 when the row is relevant to the name, −1 when not, what Explain and a filter show.
     (A filter-F1 objective cannot choose: with one concept per name, dropping a name never
     raises any word's F1.)
Pure functions on arrays; I/O is in training.cedar.fit.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from training.cedar.sparse_codes import concept_label

if TYPE_CHECKING:
    from scipy import sparse

OTHER_CAPTIONS = 2
CANDIDATES = 10
WORD_SET = 5
MIN_RELEVANT = 10
THRESHOLDS = tuple(round(t, 2) for t in np.arange(0.0, 0.96, 0.05))


def word_relevance(
    mentions: Sequence[frozenset[int]],
    groups: Sequence[str],
    n_words: int,
    others: int = OTHER_CAPTIONS,
) -> sparse.csr_matrix:
    """bool [rows, words]: the word is used by at least `others` other captions of the row's
    group (its own caption left out); with one caption per group, by the row's own caption."""
    if len(mentions) != len(groups):
        raise ValueError(f"{len(mentions)} captions but {len(groups)} groups")
    members: dict[str, list[int]] = defaultdict(list)
    for row, group in enumerate(groups):
        members[group].append(row)
    own_caption = max((len(m) for m in members.values()), default=0) <= 1
    indptr, indices = [0], []
    per_group = {g: Counter(w for r in rows for w in mentions[r]) for g, rows in members.items()}
    for row, group in enumerate(groups):
        if own_caption:
            words = sorted(mentions[row])
        else:
            counts, own = per_group[group], mentions[row]
            words = sorted(w for w, n in counts.items() if n - (w in own) >= others)
        indices.extend(words)
        indptr.append(len(indices))
    from scipy import sparse

    data = np.ones(len(indices), dtype=np.float32)
    return sparse.csr_matrix((data, indices, indptr), shape=(len(groups), n_words))


def fires_matrix(active: np.ndarray, n_concepts: int) -> sparse.csr_matrix:
    """bool [rows, concepts] (as float32) from the active concept ids [rows, k]."""
    from scipy import sparse

    rows, k = active.shape
    data = np.ones(rows * k, dtype=np.float32)
    matrix = sparse.csr_matrix(
        (data, (np.repeat(np.arange(rows), k), active.reshape(-1))), shape=(rows, n_concepts)
    )
    matrix.sum_duplicates()
    matrix.data[:] = 1.0  # an id listed twice in a row still counts once
    return matrix


@dataclass
class Cooccurrence:
    """On some rows: hits [C, W] (c active and w relevant), active [C], support [W]."""

    hits: np.ndarray
    active: np.ndarray
    support: np.ndarray
    rows: int

    def precision(self) -> np.ndarray:
        return self.hits / np.maximum(self.active, 1)[:, None]

    def f1(self) -> np.ndarray:
        return 2 * self.hits / np.maximum(self.active[:, None] + self.support[None, :], 1)


def cooccurrence(active: np.ndarray, relevant: sparse.csr_matrix, n_concepts: int) -> Cooccurrence:
    fires = fires_matrix(active, n_concepts)
    return Cooccurrence(
        hits=np.asarray((fires.T @ relevant).todense(), dtype=np.float64),
        active=np.asarray(fires.sum(axis=0)).reshape(-1),
        support=np.asarray(relevant.sum(axis=0)).reshape(-1),
        rows=active.shape[0],
    )


@dataclass
class DataName:
    concept: int
    word: int | None  # the vocabulary index of the name, None when left unnamed
    train_f1: float
    precision: float | None  # on the val rows


def choose_names(
    cosines: np.ndarray,
    train: Cooccurrence,
    signed: bool,
    candidates: int = CANDIDATES,
) -> list[DataName]:
    """Steps 1–3 of the module doc: one word per concept (or none), one concept per word."""
    n_concepts, n_words = cosines.shape
    f1 = train.f1()
    top = np.argsort(-cosines, axis=1, kind="stable")[:, : min(candidates, n_words)]
    pairs = sorted(
        ((float(f1[c, w]), c, int(w)) for c in range(n_concepts) for w in top[c] if f1[c, w] > 0),
        key=lambda p: (-p[0], p[1], p[2]),
    )
    chosen: dict[int, tuple[int, float]] = {}
    given: set[int] = set()
    for score, c, w in pairs:
        if c in chosen or w in given:
            continue
        chosen[c] = (w, score)
        given.add(w)
    if signed:
        base = train.support / max(train.rows, 1)
        precision = train.precision()
        for axis in range(n_concepts // 2):
            plus, minus = 2 * axis, 2 * axis + 1
            if plus not in chosen or minus not in chosen:
                continue
            (w_plus, s_plus), (w_minus, s_minus) = chosen[plus], chosen[minus]
            best_plus, best_minus = (word_set(f1[c]) for c in (plus, minus))
            opposite = (
                not best_plus & best_minus
                and precision[plus, w_minus] < base[w_minus]
                and precision[minus, w_plus] < base[w_plus]
            )
            if not opposite:
                del chosen[minus if s_minus < s_plus else plus]
    return [DataName(c, *chosen.get(c, (None, 0.0)), None) for c in range(n_concepts)]


def word_set(f1: np.ndarray, size: int = WORD_SET) -> set[int]:
    """A concept's words: its `size` words of best train F1 (those it ever hits)."""
    best = np.argsort(-f1, kind="stable")[:size]
    return {int(w) for w in best if f1[w] > 0}


def with_precision(names: Sequence[DataName], val: Cooccurrence) -> list[DataName]:
    """Each name's precision on the val rows (None where the concept is never active there)."""
    precision = val.precision()
    return [
        DataName(
            n.concept,
            n.word,
            n.train_f1,
            float(precision[n.concept, n.word])
            if n.word is not None and val.active[n.concept] > 0
            else None,
        )
        for n in names
    ]


def trusted(names: Sequence[DataName], threshold: float) -> list[DataName]:
    """The names whose val precision reaches `threshold`; the others left unnamed."""
    return [
        n
        if n.word is not None and n.precision is not None and n.precision >= threshold
        else DataName(n.concept, None, n.train_f1, n.precision)
        for n in names
    ]


def shown_utility(names: Sequence[DataName], val: Cooccurrence, threshold: float) -> float:
    """What the names kept at `threshold` are worth to someone reading them on the val rows:
    each (row, active named concept) pair counts +1 when the row is relevant to the name and −1
    when it is not, so a name adds active · (2 · precision − 1)."""
    return float(
        sum(
            val.active[n.concept] * (2 * val.hits[n.concept, n.word] / val.active[n.concept] - 1)
            for n in trusted(names, threshold)
            if n.word is not None and val.active[n.concept] > 0
        )
    )


def pick_threshold(
    names: Sequence[DataName],
    val: Cooccurrence,
    thresholds: Sequence[float] = THRESHOLDS,
) -> tuple[float, dict[float, float]]:
    """The precision threshold of greatest val utility (`shown_utility`), and the utility at
    every threshold (ties: the lower threshold, naming more)."""
    curve = {float(t): shown_utility(names, val, t) for t in thresholds}
    best = max(curve, key=lambda t: (curve[t], -t))
    return best, curve


def name_of(name: DataName, words: Sequence[str]) -> str:
    """The concept's name: its word, or its label when left unnamed."""
    return words[name.word] if name.word is not None else concept_label(name.concept)


def naming_precision(
    names: Sequence[str | None], test: Cooccurrence, words: Sequence[str]
) -> dict[str, float]:
    """How well names hold on other rows: mean over the named concepts active there of
    P(name relevant | active), the same weighted by how often each is active, and counts.
    A name outside `words` (the rows' vocabulary) counts as precision 0."""
    index = {w: i for i, w in enumerate(words)}
    precision = test.precision()
    values, weights = [], []
    for c, name in enumerate(names):
        if name is None or test.active[c] == 0:
            continue
        w = index.get(name)
        values.append(float(precision[c, w]) if w is not None else 0.0)
        weights.append(float(test.active[c]))
    named = [n for n in names if n is not None]
    return {
        "named": len(named),
        "distinct_names": len(set(named)),
        "active_named": len(values),
        "precision": float(np.mean(values)) if values else 0.0,
        "precision_weighted": float(np.average(values, weights=weights)) if values else 0.0,
    }
