"""Concept-filter quality on held-out images: does "require the concept named w" find the rows
about w?

Rows are the gallery's captions of held-out images (Flickr8k test). For each frequent noun,
adjective and verb w of those captions (`frequent_words`), a row is relevant when at least two
*other* captions of its image use w (training.cedar.naming.word_relevance: judged without the
row's own caption). A filter allows a set of rows; its precision is |allowed ∩ relevant| /
|allowed| and its recall |allowed ∩ relevant| / |relevant|. Scores are macro-averaged per word
class, over every word (a filter that cannot be built for a word — no concept of that name —
scores precision 0 and recall 0) and over the words it covers. Every method (CEDAR, an SAE, a
keyword match on the row's own caption, a cosine threshold) is scored by this one function.
Pure functions on arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from training.cedar.naming import MIN_RELEVANT

if TYPE_CHECKING:
    from scipy import sparse

WORD_CLASSES = ("noun", "adjective", "verb")
NEUTRAL_QUERY = "a photo"  # the filtered search whose top ten P@10 reads
TOP = 10
COSINE_THRESHOLDS = tuple(round(t, 2) for t in np.arange(0.0, 0.8, 0.02))


def frequent_words(
    relevant: sparse.csr_matrix, classes: Sequence[str], min_relevant: int = MIN_RELEVANT
) -> np.ndarray:
    """The word indices with at least `min_relevant` relevant rows, of a scored class."""
    support = np.asarray(relevant.sum(axis=0)).reshape(-1)
    keep = [w for w, c in enumerate(classes) if support[w] >= min_relevant and c in WORD_CLASSES]
    return np.array(keep, dtype=np.int64)


def filter_scores(allowed: np.ndarray, relevant: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per word: (precision, recall) of the allowed rows, bool [W, N] each; precision 0 for an
    empty allowed set."""
    allowed = np.asarray(allowed, dtype=bool)
    relevant = np.asarray(relevant, dtype=bool)
    if allowed.shape != relevant.shape:
        raise ValueError(f"allowed {allowed.shape} and relevant {relevant.shape} differ")
    hits = (allowed & relevant).sum(axis=1).astype(np.float64)
    precision = hits / np.maximum(allowed.sum(axis=1), 1)
    recall = hits / np.maximum(relevant.sum(axis=1), 1)
    return precision, recall


def precision_at_top(allowed: np.ndarray, relevant: np.ndarray, ranking: np.ndarray) -> np.ndarray:
    """Per word: the share of relevant rows among the first TOP allowed rows in `ranking` (the
    rows ordered by a neutral query's score: a filtered search's top ten), over TOP however
    many are allowed, so a filter that allows fewer than ten rows loses the rest."""
    order = np.asarray(ranking)
    ranked_allowed = np.asarray(allowed, dtype=bool)[:, order]
    ranked_relevant = np.asarray(relevant, dtype=bool)[:, order]
    taken = np.cumsum(ranked_allowed, axis=1) <= TOP
    return (ranked_allowed & taken & ranked_relevant).sum(axis=1) / TOP


def f1_of(precision: np.ndarray, recall: np.ndarray) -> np.ndarray:
    total = precision + recall
    return np.where(total > 0, 2 * precision * recall / np.maximum(total, 1e-12), 0.0)


def filter_quality(
    allowed: np.ndarray,
    covered: np.ndarray,
    relevant: np.ndarray,
    classes: Sequence[str],
    ranking: np.ndarray | None = None,
) -> dict[str, Any]:
    """Macro precision and recall per word class (module doc). `allowed` [W, N] bool, `covered`
    [W] bool (the method has a filter for the word), `relevant` [W, N] bool, `classes` [W];
    with `ranking` (the rows in a neutral query's order), P@10 of the filtered search too."""
    covered = np.asarray(covered, dtype=bool)
    precision, recall = filter_scores(allowed, relevant)
    at_top = (
        np.where(covered, precision_at_top(allowed, relevant, ranking), 0.0)
        if ranking is not None
        else None
    )
    precision, recall = np.where(covered, precision, 0.0), np.where(covered, recall, 0.0)
    f1 = f1_of(precision, recall)
    out: dict[str, Any] = {}
    labels = np.asarray(classes)
    for name in (*WORD_CLASSES, "all"):
        mask = labels == name if name != "all" else np.ones(len(labels), dtype=bool)
        if not mask.any():
            continue
        on = mask & covered
        out[name] = {
            "words": int(mask.sum()),
            "covered": int(on.sum()),
            "precision": float(precision[mask].mean()),
            "recall": float(recall[mask].mean()),
            "f1": float(f1[mask].mean()),
            "precision_covered": float(precision[on].mean()) if on.any() else None,
            "recall_covered": float(recall[on].mean()) if on.any() else None,
        }
        if at_top is not None:
            out[name]["p_at_10"] = float(at_top[mask].mean())
    return out


def cosine_allowed(scores: np.ndarray, threshold: float) -> np.ndarray:
    """bool [W, N]: the rows whose cosine with the word reaches the threshold."""
    return np.asarray(scores) >= threshold


def pick_cosine_threshold(
    scores: np.ndarray,
    relevant: np.ndarray,
    thresholds: Sequence[float] = COSINE_THRESHOLDS,
) -> tuple[float, dict[float, float]]:
    """The cosine threshold of best macro F1 on the (val) rows, and F1 at every threshold."""
    curve = {}
    for t in thresholds:
        precision, recall = filter_scores(cosine_allowed(scores, t), relevant)
        f1 = f1_of(precision, recall)
        curve[float(t)] = float(f1.mean()) if len(f1) else 0.0
    best = max(curve, key=lambda t: (curve[t], -t))
    return best, curve


def quality_table(results: dict[str, dict[str, Any]], words: dict[str, int]) -> str:
    """Markdown: per method, precision / recall per word class (and coverage)."""
    classes = [c for c in (*WORD_CLASSES, "all") if c in words]
    head = " | ".join(f"{c} ({words[c]} words) P / R / covered" for c in classes)
    lines = [f"| method | {head} | all: F1 | all: P@10 |", "|---|" + "---|" * (len(classes) + 2)]
    for method, result in results.items():
        cells = []
        for c in classes:
            r = result.get(c)
            cells.append(
                "–" if r is None else f"{r['precision']:.3f} / {r['recall']:.3f} / {r['covered']}"
            )
        every = result.get("all", {})
        cells.append(f"{every['f1']:.3f}" if "f1" in every else "–")
        cells.append(f"{every['p_at_10']:.3f}" if "p_at_10" in every else "–")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def named_filters(
    fires: Any, concept_names: Sequence[str | None], words: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """The filter "require the concept(s) named w" of each word: (allowed [W, N] bool — rows
    where any concept of that name is active; `fires` is bool [N, C], dense or scipy sparse —
    and covered [W] bool, whether any concept bears the name)."""
    by_name: dict[str, list[int]] = {}
    for c, name in enumerate(concept_names):
        if name is not None:
            by_name.setdefault(name, []).append(c)
    rows = fires.shape[0]
    allowed = np.zeros((len(words), rows), dtype=bool)
    covered = np.zeros(len(words), dtype=bool)
    for i, word in enumerate(words):
        concepts = by_name.get(word)
        if not concepts:
            continue
        covered[i] = True
        hits = fires[:, concepts]
        hits = hits.toarray() if hasattr(hits, "toarray") else np.asarray(hits)
        allowed[i] = hits.any(axis=1)
    return allowed, covered


def naming_table(naming: dict[str, dict[str, float]]) -> str:
    """Markdown: per naming, how many concepts are named and how precise the names are."""
    lines = [
        "| naming | named concepts | distinct names | mean precision | weighted by activity |",
        "|---|---:|---:|---:|---:|",
    ]
    for method, n in naming.items():
        lines.append(
            f"| {method} | {n['named']} | {n['distinct_names']} | {n['precision']:.3f} | "
            f"{n['precision_weighted']:.3f} |"
        )
    return "\n".join(lines) + "\n"
