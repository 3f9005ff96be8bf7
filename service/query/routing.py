"""AUTO granularity: choose a text query's granularity from its phrase structure, by rule.

The query is lower-cased, split into words and punctuation, and each word tagged from the
caption lexicon (training/core/lexicon, shared with the caption views: determiners, adjectives,
nouns, prepositions, auxiliaries, `word_class` for verb forms; an unknown content word counts
as a noun, as it does there). Words are then chunked into noun phrases (determiner, adjectives,
nouns) and links (a verb or preposition, with the particles and prepositions right after it:
"standing next to" is one link). A preposition or "wearing" followed by clothing ("a man in a
red shirt", "a girl wearing a hat") or "in" followed by colours ("a man in red") is an
attribute of the noun phrase before it, not a link — as in the extractor.

The rules, first match wins:

    1. several sentences                                    → full    (more than one caption)
    2. no noun phrase and no attribute word                 → full    (nothing to anchor)
    3. a clause: a comma or semicolon, or a clause word     → caption
       (who, which, that, while, where, when, because, as)
    4. two or more links ("chasing ... on the beach"), or a → caption (a place or a second
       link before any noun phrase ("in the park")                   relation: scene level)
    5. one link ("dog chasing a ball", "a dog on the beach",→ relation
       "a dog running")
    6. a noun phrase with an attribute ("a red dog",        → attribute
       "a man in a red shirt"), or attribute words alone
    7. otherwise: bare noun phrases ("a dog", "dogs",       → object
       "a dog and a cat")

Image and vector queries have no phrase structure: AUTO sends them to the full vector.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from training.core.errors import InputError
from training.core.granularity import Granularity
from training.core.lexicon.nouns import APPEARANCE_NOUNS, NOUNS
from training.core.lexicon.words import (
    ADJECTIVES,
    AUXILIARIES,
    DETERMINERS,
    MULTIWORD_PREPOSITIONS,
    PREPOSITIONS,
    word_class,
)

CLAUSE_WORDS = frozenset(
    {"who", "which", "that", "while", "whilst", "where", "when", "because", "as"}
)
CONJUNCTIONS = frozenset({"and", "or", "&"})
CLAUSE_PUNCTUATION = frozenset({",", ";", ":"})
SENTENCE_END = frozenset({".", "!", "?"})
MODIFIER_LINKS = frozenset({"in", "with", "wearing"})
_TOKEN = re.compile(r"[a-z0-9][a-z0-9'-]*|[,;:.!?&]")

# word tags
DET, ADJ, NOUN, VERB, PREP, AUX, CONJ, CLAUSE, PUNCT, END, OTHER = (
    "det", "adj", "noun", "verb", "prep", "aux", "conj", "clause", "punct", "end", "other"
)  # fmt: skip


@dataclass(frozen=True)
class Route:
    """Where a query goes and why (the reason names the rule that fired)."""

    granularity: Granularity
    reason: str


@dataclass
class NounPhrase:
    words: list[str]
    head: str
    attributes: list[str] = field(default_factory=list)


@dataclass
class PhraseStructure:
    """What the rules look at: noun phrases, links (each a list of words), and flags."""

    phrases: list[NounPhrase] = field(default_factory=list)
    links: list[list[str]] = field(default_factory=list)
    leading_link: bool = False  # a link before any noun phrase ("in the park")
    bare_attributes: list[str] = field(default_factory=list)  # adjectives with no noun
    clause: str | None = None  # the clause word or punctuation found
    sentences: int = 1


def tokenise(text: str) -> list[str]:
    """Lower-case words and punctuation marks."""
    return _TOKEN.findall(text.lower())


def tag_words(words: list[str]) -> list[str]:
    """One tag per word (multi-word prepositions tag every word PREP)."""
    tags = [OTHER] * len(words)
    i = 0
    while i < len(words):
        multi = next((p for p in MULTIWORD_PREPOSITIONS if tuple(words[i : i + len(p)]) == p), None)
        if multi is not None:
            tags[i : i + len(multi)] = [PREP] * len(multi)
            i += len(multi)
            continue
        tags[i] = _tag(words, i)
        i += 1
    return tags


def _tag(words: list[str], i: int) -> str:
    word = words[i]
    if word in SENTENCE_END:
        return END
    if word in CLAUSE_PUNCTUATION:
        return PUNCT
    if word in CONJUNCTIONS:
        return CONJ
    if word in CLAUSE_WORDS:
        return CLAUSE
    if word in DETERMINERS:
        return DET
    if word in AUXILIARIES:
        return AUX
    if word in PREPOSITIONS:
        return PREP
    if word == "dressed":
        return VERB
    if word in ADJECTIVES and word not in NOUNS:
        return ADJ
    if word in NOUNS:
        following = words[i + 1] if i + 1 < len(words) else ""
        # "light" or "gold" before a noun or an adjective is an adjective
        return (
            ADJ if word in ADJECTIVES and (following in NOUNS or following in ADJECTIVES) else NOUN
        )
    found = word_class(word)
    if found is None:
        return OTHER
    return {"noun": NOUN, "verb": VERB, "adjective": ADJ}.get(found[1], OTHER)


def phrase_structure(text: str) -> PhraseStructure:
    """Chunk a query into noun phrases and links (see the module docstring)."""
    words = tokenise(text)
    tags = tag_words(words)
    structure = PhraseStructure()
    # sentences: an end mark followed by more words
    structure.sentences = 1 + sum(
        1 for i, t in enumerate(tags[:-1]) if t == END and any(x != END for x in tags[i + 1 :])
    )
    i = 0
    while i < len(words):
        tag = tags[i]
        if tag in (DET, ADJ, NOUN):
            i = _noun_phrase(words, tags, i, structure)
        elif tag in (VERB, PREP):
            i = _link(words, tags, i, structure)
        else:
            if tag in (CLAUSE, PUNCT) and structure.clause is None:
                structure.clause = words[i]
            i += 1
    return structure


def _noun_phrase(words: list[str], tags: list[str], i: int, structure: PhraseStructure) -> int:
    """Read DET? (ADJ | NOUN | ADJ and ADJ)* from i; record a noun phrase or bare attributes."""
    start = i
    if tags[i] == DET:
        i += 1
    attributes: list[str] = []
    nouns: list[str] = []
    while i < len(words):
        if tags[i] == ADJ and not nouns:
            attributes.append(words[i])
        elif tags[i] == NOUN:
            nouns.append(words[i])
        elif (
            tags[i] == CONJ
            and attributes
            and not nouns
            and i + 1 < len(words)
            and tags[i + 1] == ADJ
        ):
            pass  # "black and white dog"
        else:
            break
        i += 1
    if nouns:
        structure.phrases.append(NounPhrase(words[start:i], nouns[-1], attributes))
    elif attributes:
        structure.bare_attributes += attributes
    return max(i, start + 1)


def _link(words: list[str], tags: list[str], i: int, structure: PhraseStructure) -> int:
    """Read a verb or preposition and the prepositions right after it; an attribute modifier
    ("in a red shirt", "wearing a hat", "in red") joins the previous noun phrase instead."""
    start = i
    while i < len(words) and tags[i] in (VERB, PREP):
        i += 1
    link = words[start:i]
    previous = structure.phrases[-1] if structure.phrases else None
    if previous is not None and _is_modifier(link):
        before = len(structure.phrases)
        after = _noun_phrase(words, tags, i, structure) if i < len(words) else i
        if len(structure.phrases) > before and structure.phrases[-1].head in APPEARANCE_NOUNS:
            modifier = structure.phrases.pop()
            previous.words += [*link, *modifier.words]
            previous.attributes += modifier.attributes or [modifier.head]
            return after
        if len(structure.phrases) == before and structure.bare_attributes:
            previous.attributes += structure.bare_attributes  # "a man in red"
            structure.bare_attributes = []
            return after
        structure.links.append(link)
        return after
    if previous is None:
        structure.leading_link = True
    structure.links.append(link)
    return i


def _is_modifier(link: list[str]) -> bool:
    return link[0] in MODIFIER_LINKS or link[:2] in (["dressed", "in"], ["dressed", "as"])


@functools.lru_cache(maxsize=4096)
def route_text(text: str) -> Route:
    """The granularity AUTO picks for a text query (rules in the module docstring); pure, so
    kept for the texts seen last (a served text is routed when it is queued and searched)."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("empty text query")
    s = phrase_structure(text)
    attributes = [a for p in s.phrases for a in p.attributes] + s.bare_attributes
    if s.sentences > 1:
        return Route(Granularity.FULL, f"{s.sentences} sentences: more than one caption")
    if not s.phrases and not attributes:
        return Route(Granularity.FULL, "no noun phrase or attribute word to anchor a granularity")
    if s.clause is not None:
        return Route(Granularity.CAPTION, f"a clause ({s.clause!r}): a scene description")
    if len(s.links) >= 2 or s.leading_link:
        named = " / ".join(" ".join(link) for link in s.links)
        return Route(Granularity.CAPTION, f"a place or second relation ({named}): scene level")
    if s.links:
        return Route(Granularity.RELATION, f"one relation ({' '.join(s.links[0])})")
    if attributes:
        return Route(Granularity.ATTRIBUTE, f"attribute words ({', '.join(attributes)})")
    heads = ", ".join(p.head for p in s.phrases)
    return Route(Granularity.OBJECT, f"bare noun phrase(s) ({heads})")
