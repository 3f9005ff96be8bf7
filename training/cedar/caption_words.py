"""The caption vocabulary concepts are named from.

`caption_vocabulary`: the nouns, adjectives and verbs of the captions (the caption lexicon,
`training.core.lexicon`), with
  - stop words out (`STOP_WORDS`: "front", "next", "top", "background" …);
  - verb forms folded into one word, written as its -ing form ("runs", "run" → "running");
  - misspellings merged into their word (`typo_targets`): a plural typo of a lexicon noun
    ("mans", "persons" → "man", "person"), and a rare token the lexicon does not know, one
    deletion, transposition or insertion from a token seen `TYPO_RATIO` times as often
    ("feild" → "field", "balck" → "black");
  - words seen fewer than `min_count` times out (after the merges).
`CaptionVocabulary.mentions(text)` gives the words a caption uses, by the same rules.

Pure functions on strings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from training.core.lexicon.nouns import SINGULAR, pluralise
from training.core.lexicon.words import (
    ADJECTIVES,
    STOP_WORDS,
    VERBS_3SG,
    VERBS_BARE,
    word_class,
)
from training.views.mentions import ing_form, verb_lemma

TYPO_RATIO = 50
TYPO_MIN_LETTERS = 4
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def token_key(token: str) -> str:
    return token.lower().strip(".,;:!?\"'()")


@dataclass(frozen=True)
class CaptionVocabulary:
    """The words (names), their classes and counts, most frequent first; `forms` maps a caption
    token (lower case, punctuation stripped) to its word's index."""

    words: list[str]
    classes: list[str]
    counts: list[int]
    forms: dict[str, int]

    def terms(self) -> list[tuple[str, str]]:
        return list(zip(self.words, self.classes, strict=True))

    def mentions(self, text: str) -> frozenset[int]:
        """The indices of the words a caption uses."""
        found = (self.forms.get(token_key(t)) for t in text.split())
        return frozenset(i for i in found if i is not None)

    @classmethod
    def given(cls, terms: Sequence[tuple[str, str]]) -> CaptionVocabulary:
        """A user's terms: a caption uses a term when one of its tokens is the term."""
        words = [w for w, _ in terms]
        forms = {token_key(w): i for i, w in enumerate(words)}
        return cls(words, [c for _, c in terms], [0] * len(words), forms)


def _known(token: str) -> bool:
    """Whether the caption lexicon knows a token (so it is no misspelling)."""
    return (
        token in SINGULAR
        or token in ADJECTIVES
        or token in VERBS_3SG
        or token in VERBS_BARE
        or verb_lemma(token) != token
    )


def edits(word: str) -> set[str]:
    """Every string one deletion, transposition or insertion away (substitutions are left out:
    "glass"/"grass", "block"/"black" are words, not typos)."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    return (
        {a + b[1:] for a, b in splits if b}
        | {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
        | {a + c + b for a, b in splits for c in _LETTERS}
    ) - {word}


def plural_typo(token: str) -> str | None:
    """The noun a plural typo means: a lexicon singular + "s" that is not its plural ("mans",
    "persons", "leafs" → "man", "person", "leaf")."""
    if not token.endswith("s") or _known(token):
        return None
    stem = token[:-1]
    if SINGULAR.get(stem) == stem and pluralise(stem) != token:
        return stem
    return None


def typo_targets(counts: Counter[str], min_count: int) -> dict[str, str]:
    """token → the word it misspells, for the typos among the tokens (module doc): a plural typo
    whatever its count; a rare token (seen fewer than `min_count` times) the lexicon does not
    know, of `TYPO_MIN_LETTERS` letters or more, one edit from a token seen `TYPO_RATIO` times
    as often ("feild", "balck", "mountian")."""
    targets: dict[str, str] = {}
    for token, n in counts.items():
        stem = plural_typo(token)
        if stem is not None:
            targets[token] = stem
            continue
        if n >= min_count or len(token) < TYPO_MIN_LETTERS or _known(token) or "-" in token:
            continue
        near = [v for v in edits(token) if counts.get(v, 0) >= TYPO_RATIO * n]
        if near:
            targets[token] = max(near, key=lambda v: (counts[v], v))
    return targets


def _word_of(entry: tuple[str, str]) -> tuple[str, str]:
    """(word, class) of a token's lexicon entry, verb forms folded into the -ing form."""
    lemma, kind = entry
    if kind == "verb":
        bare = verb_lemma(lemma)
        return (ing_form(bare) if bare in VERBS_BARE else lemma), kind
    return lemma, kind


def caption_vocabulary(
    texts: Iterable[str], min_count: int = 5, clean: bool = True
) -> CaptionVocabulary:
    """The vocabulary of the captions (module doc). `clean=False` gives the raw one the catalog
    was named from before: every content word as `word_class` gives it, nothing merged or
    left out but function words (kept to measure the clean-up against)."""
    tokens: Counter[str] = Counter()
    for text in texts:
        tokens.update(k for k in map(token_key, text.split()) if word_class(k) is not None)
    typos = typo_targets(tokens, min_count) if clean else {}
    counts: Counter[tuple[str, str]] = Counter()
    word_of_token: dict[str, tuple[str, str]] = {}
    for token, n in tokens.items():
        entry = word_class(typos.get(token, token))
        if entry is None:
            continue
        word = _word_of(entry) if clean else entry
        if clean and (word[0] in STOP_WORDS or entry[0] in STOP_WORDS):
            continue
        word_of_token[token] = word
        counts[word] += n
    kept = [(w, n) for w, n in counts.most_common() if n >= min_count]
    index = {w: i for i, (w, _) in enumerate(kept)}
    forms = {t: index[w] for t, w in word_of_token.items() if w in index}
    return CaptionVocabulary(
        words=[w for (w, _), _ in kept],
        classes=[c for (_, c), _ in kept],
        counts=[n for _, n in kept],
        forms=forms,
    )


def lexicon_terms() -> CaptionVocabulary:
    """Every noun, adjective and verb of the caption lexicon, as the clean vocabulary names it
    (plurals singular, verbs in their -ing form)."""
    forms = sorted({*SINGULAR.values(), *ADJECTIVES, *VERBS_BARE})
    return caption_vocabulary(forms, min_count=1)
