"""Near misses: the concepts a name that matches none may have meant.

    near_misses(catalog, "zebra")   # [(entry, 0.95, "zebra"), (entry, 0.91, None), ...]
    suggestion(catalog, "zebra")    # "; did you mean: horse (-3, runner-up zebra), zebras (+12)?"
    typo_hint(catalog, "dgo", 0, 8091)  #  "'dgo' allows 0 of 8091 rows …; did you mean: dog (+12)?"
    typo_hint(catalog, "giraffe", 0, 8091, known=lexicon)  # None: a real word, meant

A name is near a concept when difflib's similarity ratio with the concept's name, or with one
of its runner-ups (the next vocabulary words of its axis, weighted a little lower; only words
that name no concept themselves, which are suggested as that concept), reaches NEAR_CUTOFF; a
substring either way counts as 0.8. Works on catalog entries
(training.cedar.catalog.CatalogEntry) and on served ConceptInfo alike; the standard library
only, so the client path can use it without numpy or torch.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from difflib import SequenceMatcher
from typing import Protocol, TypeVar

NEAR_MISSES = 5
NEAR_CUTOFF = 0.6  # the similarity a near miss needs (zebra / zebras: 0.91)
RUNNER_UP_WEIGHT = 0.95  # a runner-up's match counts a little less than the name's own
SUBSTRING = 0.8
# a zero-shot phrase allowing at most this share of a gallery's rows, and near a catalog name,
# reads as a typo of that name (`typo_hint`)
ALMOST_NONE = 0.001
TYPO_SUGGESTIONS = 3


class NamedConcept(Protocol):
    """What near-miss matching reads of a concept: a catalog entry or a served ConceptInfo."""

    name: str
    label: str
    score: float
    runner_ups: list[tuple[str, float]]
    named: bool


C = TypeVar("C", bound=NamedConcept)


def name_similarity(
    word: str, entry: NamedConcept, names: frozenset[str] = frozenset(), floor: float = 0.0
) -> tuple[float, str | None]:
    """How near `word` (lower-cased) is to a concept: difflib's ratio with its name, or with a
    runner-up that is no concept's name in `names` (lower-cased; such a word is suggested as
    that concept instead), weighted by RUNNER_UP_WEIGHT; a substring either way counts as
    SUBSTRING. Also the runner-up that matched best, None when the name did. A similarity
    below `floor` may come back as any value below it (its ratio is not computed where
    difflib's upper bounds already fall short: a near-miss search asks only what reaches its
    cutoff)."""
    best, via = _similarity(word, entry.name.lower(), floor), None
    for runner_up, _ in entry.runner_ups:
        if runner_up.lower() in names:
            continue
        value = RUNNER_UP_WEIGHT * _similarity(word, runner_up.lower(), floor / RUNNER_UP_WEIGHT)
        if value > best:
            best, via = value, runner_up
    return best, via


def _similarity(word: str, name: str, floor: float = 0.0) -> float:
    """difflib's ratio (SUBSTRING at least for a substring either way); below `floor`, an upper
    bound of it where one already falls short (real_quick_ratio, then quick_ratio, as
    difflib.get_close_matches screens)."""
    substring = SUBSTRING if word and name and (word in name or name in word) else 0.0
    if substring < floor:  # real_quick_ratio, without making a matcher
        total = len(word) + len(name)
        upper = 2.0 * min(len(word), len(name)) / total if total else 1.0
        if upper < floor:
            return upper
    matcher = SequenceMatcher(None, word, name)
    if substring < floor:
        upper = matcher.quick_ratio()
        if upper < floor:
            return upper
    return max(matcher.ratio(), substring)


def near_misses(
    catalog: Sequence[C], word: str, most: int = NEAR_MISSES, cutoff: float = NEAR_CUTOFF
) -> list[tuple[C, float, str | None]]:
    """The concepts a name that matched none may have meant, nearest first, one per name (its
    best-scored concept): (concept, similarity, the runner-up that matched or None). Unnamed
    axes (named by their label) are never suggested; a word concept (its label its word) is."""
    key = word.strip().lower()
    names = frozenset(e.name.lower() for e in catalog)
    best: dict[str, tuple[C, float, str | None]] = {}
    for entry in catalog:
        if not key or not entry.named or _is_label(entry.name):
            continue
        value, via = name_similarity(key, entry, names, cutoff)
        name = entry.name.lower()
        if value < cutoff or name == key:
            continue
        held = best.get(name)
        if held is None or (value, entry.score) > (held[1], held[0].score):
            best[name] = (entry, value, via)
    ranked = sorted(best.values(), key=lambda t: (-t[1], -t[0].score, t[0].name))
    return ranked[:most]


def suggestion(catalog: Sequence[NamedConcept], word: str, most: int = NEAR_MISSES) -> str:
    """The tail of the message for a name the catalog lacks: '; did you mean: zebras (+12),
    horse (-3, runner-up zebra)?', or that no name is near it."""
    return suggested(near_misses(catalog, word, most))


def suggested(found: Sequence[tuple[NamedConcept, float, str | None]]) -> str:
    """`suggestion`'s text for near misses already found."""
    if not found:
        return "; no concept has a name near it"
    parts = [
        f"{_short(e.name)} ({e.label}{f', runner-up {_short(via)}' if via else ''})"
        for e, _, via in found
    ]
    return f"; did you mean: {', '.join(parts)}?"


def typo_hint(
    catalog: Sequence[NamedConcept],
    phrase: str,
    allowed: int,
    rows: int,
    known: Collection[str] = frozenset(),
) -> str | None:
    """The warning of a zero-shot phrase that allows (almost) no rows of a gallery of `rows`
    (at most ALMOST_NONE of them) and is a near miss of catalog names: most likely a typo of one
    ("'dgo' allows 0 of 300 rows as a zero-shot phrase; did you mean: dog (+12)?"); None when it
    allows more, when no name is near it, or when every word of it is a word of `known`
    (lower case): a real word the gallery hardly shows ("giraffe" on a gallery of dogs) was
    meant, whatever catalog names are spelt like it."""
    if allowed > ALMOST_NONE * rows:
        return None
    words = phrase.lower().split()
    if words and all(w in known for w in words):
        return None
    found = near_misses(catalog, phrase, TYPO_SUGGESTIONS)
    if not found:
        return None
    return f"'{phrase}' allows {allowed} of {rows} rows as a zero-shot phrase{suggested(found)}"


def _is_label(name: str) -> bool:
    """Whether a name is an axis's label ("+12", "-3"): an unnamed axis goes by it."""
    return name[:1] in "+-" and name[1:].isdigit()


def _short(name: str, most: int = 24) -> str:
    return name if len(name) <= most else name[: most - 1] + "…"
