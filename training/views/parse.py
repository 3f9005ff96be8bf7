"""The rule-based parse of a (Flickr8k-style) caption: token positions of its roles.

A caption is read left to right against the closed word lists of training.core.lexicon:

    [there is|are] SUBJECT [post-modifiers] [and SUBJECT2] [is|are] VERB [particle] [prep] OBJECT

    SUBJECT      [determiner | number | "a group of" ...] adjective* noun+   (head = last noun)
    post-mods    "in/with/wearing/dressed in" + clothing or appearance  -> attribute of the subject
                 any other "prep + noun phrase" ("with a ball in its mouth") -> skipped
    VERB         an -ing form, or a known present-tense form (3rd person "runs" after a singular
                 subject, bare "run" after a plural one)
    OBJECT       the first noun phrase right after the verb, or after one preposition (and
                 particle) following it; "the edge of the water" -> "water"

Anything that fits no rule leaves the role empty rather than guessing: the subject head must be
a known noun, every word between the determiner and the head must be a known adjective or noun,
and a word after the subject that is not a known verb form ends the parse without a verb.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from training.core.errors import InputError
from training.core.lexicon.nouns import (
    APPEARANCE_NOUNS,
    NOUNS,
    PART_NOUNS,
    PLURAL_FORMS,
    QUANTITY_NOUNS,
    SINGULAR,
    SUBJECT_NOUNS,
)
from training.core.lexicon.words import (
    ADJECTIVE_LINKS,
    ADJECTIVES,
    ADVERBS,
    ATTRIBUTE_CLASS_OF,
    AUXILIARIES,
    BREED_MODIFIERS,
    COLOURS,
    DETERMINERS,
    MULTIWORD_PREPOSITIONS,
    NUMBER_WORDS,
    PARTICLES,
    PREPOSITIONS,
    VERBS_3SG,
    VERBS_BARE,
    is_ing_verb,
)


@dataclass
class NounPhrase:
    """Token span of a noun phrase: determiner index (or None), head index, attribute indices."""

    start: int
    end: int
    head: int
    det: int | None = None
    quantity: bool = False
    attributes: list[int] = field(default_factory=list)
    breed: int | None = None  # "german" of "german shepherd"


@dataclass
class Parse:
    """Token positions of every role in one caption, None where the role is absent."""

    words: list[str]
    subject: NounPhrase | None = None
    modifier_spans: list[tuple[int, int]] = field(default_factory=list)
    conjunct: NounPhrase | None = None
    verb: int | None = None
    link: list[int] = field(default_factory=list)  # particle / preposition indices
    object: NounPhrase | None = None
    subject_end: int = 0  # after the subject's post-modifiers: where "and SUBJECT2" would go
    auxiliary: int | None = None  # "is" / "are" before the verb


def normalise_caption(caption: str) -> str:
    """Collapse whitespace and drop a trailing period ("... grass ." -> "... grass").

    Raises InputError for a non-string or a caption with no words.
    """
    if not isinstance(caption, str):
        raise InputError(f"a caption must be a string, not {type(caption).__name__}")
    words = caption.split()
    while words and words[-1] == ".":
        words.pop()
    if words and words[-1].endswith(".") and len(words[-1]) > 1:
        words[-1] = words[-1].rstrip(".")
    if not words:
        raise InputError(f"empty caption: {caption!r}")
    return " ".join(words)


def parse_caption(text: str) -> Parse:
    """Role positions of a normalised caption (see the module docstring for the grammar)."""
    words = text.split()
    low = [w.lower() for w in words]
    parse = Parse(words)
    i = 2 if low[:2] in (["there", "is"], ["there", "are"]) else 0
    subject = _parse_noun_phrase(low, i, SUBJECT_NOUNS)
    if subject is None or word_at(low, subject.end) in ("'", "'s"):
        return parse
    parse.subject = subject
    i = subject.end
    attribute_run = True
    while (modifier := _parse_post_modifier(low, i)) is not None:
        end, is_attribute = modifier
        if is_attribute and attribute_run:
            parse.modifier_spans.append((i, end))
        else:
            attribute_run = False
        i = end
    parse.subject_end = i
    plural = low[subject.head] in PLURAL_FORMS or subject.quantity
    if word_at(low, i) == "and":
        conjunct = _parse_noun_phrase(low, i + 1, SUBJECT_NOUNS)
        if conjunct is None:
            return parse
        j = conjunct.end
        while (modifier := _parse_post_modifier(low, j)) is not None:
            j = modifier[0]
        parse.conjunct, i, plural = conjunct, j, True
    auxiliary = word_at(low, i) in AUXILIARIES
    if auxiliary:
        parse.auxiliary = i
        i += 1
    if word_at(low, i) in ADVERBS:
        i += 1
    if not _is_verb(low, i, auxiliary, plural):
        parse.conjunct, parse.auxiliary = None, None
        return parse
    found = _parse_object(low, i + 1)
    if found is not None:
        parse.link, parse.object = found
    if low[i] in ("wearing", "dressed") and parse.object is None:
        parse.conjunct, parse.link, parse.auxiliary = None, [], None
        return parse
    parse.verb = i
    return parse


def lower_words(parse: Parse) -> list[str]:
    """The parse's words in lower case."""
    return [w.lower() for w in parse.words]


def word_at(low: list[str], i: int) -> str:
    """The lower-case word at i, or "" past the end."""
    return low[i] if 0 <= i < len(low) else ""


def _parse_noun_phrase(low: list[str], i: int, heads: frozenset[str]) -> NounPhrase | None:
    """A noun phrase starting at i whose head is in `heads`, or None.

    [determiner | "a group of" ...] (adjective | link word | breed modifier)* noun+ ; the head
    is the last noun of the run that is in `heads` ("a football player" -> "player").
    """
    start = i
    det: int | None = None
    quantity = False
    if (
        word_at(low, i) in ("a", "an")
        and word_at(low, i + 1) in QUANTITY_NOUNS
        and word_at(low, i + 2) == "of"
    ):
        i += 3
        quantity = True
        if word_at(low, i) in ("the", "these", "those"):
            i += 1
    elif word_at(low, i) in ("lots", "plenty") and word_at(low, i + 1) == "of":
        i += 2
        quantity = True
    elif word_at(low, i) in DETERMINERS:
        det = i
        i += 1
        if word_at(low, i) in NUMBER_WORDS and word_at(low, i - 1) in ("the", "these", "those"):
            i += 1
    attributes: list[int] = []
    breed: int | None = None
    while True:
        word = word_at(low, i)
        if word in BREED_MODIFIERS and word_at(low, i + 1) in BREED_MODIFIERS[word]:
            breed = i
            i += 1
        elif word in ADJECTIVES:
            if word in ATTRIBUTE_CLASS_OF:
                attributes.append(i)
            i += 1
        elif word in ADJECTIVE_LINKS and attributes and i > start:
            nxt = word_at(low, i + 1)
            if word == "and" and nxt not in ADJECTIVES:
                break
            if word == "very" and nxt not in ADJECTIVES:
                break
            i += 1
        else:
            break
    nouns: list[int] = []
    while word_at(low, i) in NOUNS and len(nouns) < 3:
        nouns.append(i)
        i += 1
    while nouns and low[nouns[-1]] not in heads:
        nouns.pop()
    if not nouns:
        return None
    head = nouns[-1]
    if breed is not None and breed != head - 1:
        breed = None
    return NounPhrase(start, head + 1, head, det, quantity, attributes, breed)


def _parse_colour_run(low: list[str], i: int) -> tuple[int, list[int]] | None:
    """ "red", "black and white": colour words with no noun after them (as in "a man in red")."""
    attributes: list[int] = []
    while word_at(low, i) in COLOURS or (word_at(low, i) == "and" and attributes):
        if low[i] != "and":
            attributes.append(i)
        i += 1
    if not attributes or low[i - 1] == "and" or word_at(low, i) in NOUNS:
        return None
    return i, attributes


def _match_preposition(low: list[str], i: int) -> int | None:
    """The index after a (multi-word) preposition starting at i, or None."""
    for phrase in MULTIWORD_PREPOSITIONS:
        if tuple(low[i : i + len(phrase)]) == phrase:
            return i + len(phrase)
    return i + 1 if word_at(low, i) in PREPOSITIONS else None


def _parse_post_modifier(low: list[str], i: int) -> tuple[int, bool] | None:
    """A post-modifier starting at i: (end, is_attribute), or None.

    Attribute: "in|with|wearing|dressed in" + clothing/appearance noun phrase (joined by "and"),
    or "in" + colours ("in red"). Any other "preposition + noun phrase (+ of noun phrase)" is a
    non-attribute modifier that the parser steps over.
    """
    word = word_at(low, i)
    j = i
    if word == "dressed":
        j = i + 1
        if word_at(low, j) == "up":
            j += 1
        if word_at(low, j) in ("in", "as"):
            j += 1
    elif word in ("in", "with", "wearing"):
        j = i + 1
    if j > i:
        phrase = _parse_noun_phrase(low, j, APPEARANCE_NOUNS)
        if phrase is not None:
            end = phrase.end
            while word_at(low, end) == "and":
                more = _parse_noun_phrase(low, end + 1, APPEARANCE_NOUNS)
                if more is None:
                    break
                end = more.end
            if word == "with" and word_at(low, end) == "on":
                end += 1
            return end, True
        if word in ("in", "dressed"):
            colours = _parse_colour_run(low, j)
            if colours is not None:
                return colours[0], True
    if word in ("wearing", "dressed"):
        return None
    after = _match_preposition(low, i)
    if after is None:
        return None
    phrase = _parse_noun_phrase(low, after, NOUNS)
    if phrase is None:
        return None
    end = phrase.end
    if word_at(low, end) == "of":
        inner = _parse_noun_phrase(low, end + 1, NOUNS)
        if inner is not None:
            end = inner.end
    return end, False


def _is_verb(low: list[str], i: int, after_auxiliary: bool, plural: bool) -> bool:
    """Whether the word at i is the subject's verb: an -ing form, or a present-tense form that
    agrees with the subject (only without an auxiliary)."""
    word = word_at(low, i)
    if is_ing_verb(word):
        return True
    if after_auxiliary:
        return False
    return word in VERBS_BARE if plural else word in VERBS_3SG


def _parse_object(low: list[str], i: int) -> tuple[list[int], NounPhrase | None] | None:
    """The object after a verb ending at i-1: (particle/preposition indices, noun phrase) or None;
    a particle with no noun phrase after it gives ([particle], None) ("runs away").

    A noun phrase right after the verb ("plays soccer"), or after an optional particle and one
    (multi-word) preposition ("jumps up into the air"); "the edge of X" gives X.
    """
    link: list[int] = []
    for _attempt in range(2):
        phrase = _parse_noun_phrase(low, i, NOUNS)
        if phrase is None:
            after = _match_preposition(low, i)
            if after is not None:
                phrase = _parse_noun_phrase(low, after, NOUNS)
                if phrase is not None:
                    link += list(range(i, after))
        if phrase is not None:
            if (
                low[phrase.head] in PART_NOUNS
                and SINGULAR[low[phrase.head]] in PART_NOUNS
                and word_at(low, phrase.end) == "of"
            ):
                inner = _parse_noun_phrase(low, phrase.end + 1, NOUNS)
                if inner is None:
                    return None
                link += list(range(phrase.start, phrase.end + 1))
                phrase = inner
            return link, phrase
        if _attempt == 0 and word_at(low, i) in PARTICLES:
            link.append(i)
            i += 1
            continue
        break
    return (link, None) if link else None


def modifier_attributes(parse: Parse) -> list[int]:
    """Indices of attribute words inside the subject's attribute post-modifiers."""
    low = [w.lower() for w in parse.words]
    return [
        k
        for start, end in parse.modifier_spans
        for k in range(start, end)
        if low[k] in ATTRIBUTE_CLASS_OF
    ]
