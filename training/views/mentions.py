"""What a real caption mentions, at each granularity: object nouns, attribute phrases, relations.

The granularity-retrieval benchmark (training.grasp.gallery) judges a gallery row relevant to
"a dog", "a black dog" or "a man riding a horse" by what the *other* captions of its image
mention. This module reads those mentions off one caption with the caption lexicon and parse:

    nouns       every known noun in the caption, singular ("dogs" -> "dog", "people" -> "person")
    phrases     (adjective, noun) for every known adjective inside a noun phrase before its head
                ("a big black dog" -> (big, dog), (black, dog))
    relations   (subject, verb, object) of the parse, nouns singular and the verb as its lemma
                ("A man is riding a horse", "a man rides a horse" -> (man, ride, horse))

and says how each mention is written as a query: "a dog", "a black dog", "a man riding a horse".
Pure functions of the text.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from training.core.lexicon.nouns import MASS_NOUNS, NOUNS, SINGULAR, SUBJECT_NOUNS
from training.core.lexicon.words import ADJECTIVES, VERBS_3SG, VERBS_BARE, article
from training.views.parse import normalise_caption, parse_caption

Phrase = tuple[str, str]
Relation = tuple[str, str, str]

# -ing forms the spelling rules below get wrong
_IRREGULAR_ING = {"lie": "lying", "tie": "tying", "die": "dying", "ski": "skiing", "be": "being"}
_NO_DOUBLING = frozenset("wxy")
_VOWELS = frozenset("aeiou")


@dataclass(frozen=True)
class Mentions:
    nouns: frozenset[str]
    phrases: frozenset[Phrase]
    # each relation with its query text as this caption writes it: "a dog running through the
    # grass" (subject singular, the verb's -ing form, the caption's own preposition and object)
    relations: dict[Relation, str]


def ing_form(verb: str) -> str:
    """The -ing form of a bare verb: ride -> riding, run -> running, lie -> lying."""
    if verb in _IRREGULAR_ING:
        return _IRREGULAR_ING[verb]
    if verb.endswith("ie"):
        return verb[:-2] + "ying"
    if verb.endswith("e") and not verb.endswith(("ee", "ye", "oe")) and len(verb) > 2:
        return verb[:-1] + "ing"
    vowels = [i for i, c in enumerate(verb) if c in _VOWELS]
    one_syllable = len(vowels) == 1 or (len(vowels) == 2 and vowels[1] == vowels[0] + 1)
    if (
        one_syllable
        and len(verb) >= 3
        and verb[-1] not in _VOWELS | _NO_DOUBLING
        and verb[-2] in _VOWELS
        and verb[-3] not in _VOWELS
    ):
        return verb + verb[-1] + "ing"
    return verb + "ing"


def _bare_of_3sg(verb: str) -> str | None:
    for stem in (verb[:-1], verb[:-2], verb[:-3] + "y"):
        if stem in VERBS_BARE:
            return stem
    if verb.endswith("ies"):
        return verb[:-3] + "y"
    if verb.endswith(("ches", "shes", "sses", "xes", "zes")):
        return verb[:-2]
    return verb[:-1] if verb.endswith("s") else None


_LEMMA_OF_ING = {ing_form(b): b for b in VERBS_BARE}


def verb_lemma(word: str) -> str:
    """The bare form of a verb as captions write it: riding / rides / ride -> ride.

    An -ing form the lexicon does not know stays as it is (a key of its own)."""
    low = word.lower()
    if low in VERBS_BARE:
        return low
    if low in _LEMMA_OF_ING:
        return _LEMMA_OF_ING[low]
    if low in VERBS_3SG:
        return _bare_of_3sg(low) or low
    return low


def caption_mentions(caption: str) -> Mentions:
    """The nouns, (adjective, noun) phrases and (subject, verb, object) relations of a caption."""
    text = normalise_caption(caption)
    low = [w.lower().strip(".,;:!?\"'()") for w in text.split()]
    parse = parse_caption(text)
    nouns = {SINGULAR[w] for i, w in enumerate(low) if w in NOUNS and i != parse.verb}
    phrases: set[Phrase] = set()
    pending: list[str] = []  # adjectives waiting for the head noun of their phrase
    for i, word in enumerate(low):
        if word in ADJECTIVES and word not in NOUNS:
            pending.append(word)
        elif word in NOUNS:
            if pending and (i + 1 >= len(low) or low[i + 1] not in NOUNS):
                phrases.update((a, SINGULAR[word]) for a in pending)
                pending = []
            # a compound modifier ("tennis ball") keeps the adjectives for the head
        else:
            pending = []
    relations: dict[Relation, str] = {}
    if parse.subject is not None and parse.verb is not None and parse.object is not None:
        words = [w.lower() for w in parse.words]
        subject = SINGULAR[words[parse.subject.head]]
        lemma = verb_lemma(words[parse.verb])
        obj = parse.object
        key = (subject, lemma, SINGULAR.get(words[obj.head], words[obj.head]))
        det = words[obj.det] if obj.det is not None else None
        object_words = [w for w in words[obj.start : obj.end] if w not in ADJECTIVES]
        if det is not None and object_words and object_words[0] == det:
            object_words[0] = article(det, object_words[1]) if len(object_words) > 1 else det
        relations[key] = " ".join(
            [
                _with_article(subject),
                ing_form(lemma),
                *(words[k] for k in parse.link),
                *object_words,
            ]
        )
    return Mentions(frozenset(nouns), frozenset(phrases), relations)


def _with_article(noun: str) -> str:
    return f"{article('a', noun)} {noun}"


def object_query(noun: str) -> str:
    """ "a dog", "an elephant", "grass" (a mass noun takes no article)."""
    return noun if noun in MASS_NOUNS else _with_article(noun)


def attribute_query(phrase: Phrase) -> str:
    """ "a black dog", "an old man"."""
    adjective, noun = phrase
    return f"{article('a', adjective)} {adjective} {noun}"


def relation_query(relation: Relation) -> str:
    """ "a man riding a horse", for a relation no caption has written out (captions' own
    texts, `Mentions.relations`, keep their prepositions and are preferred)."""
    subject, verb, obj = relation
    return f"{_with_article(subject)} {ing_form(verb)} {object_query(obj)}"


def vocabulary_queries(per_kind: int = 3000, seed: int = 0) -> dict[str, list[str]]:
    """Query-like texts of every granularity from the caption lexicon alone (no corpus):
    "a {noun}" for every noun; `per_kind` seeded draws of "a {adjective} {noun}" and of
    "a {subject} {verb}-ing a {noun}". Keys: "object", "attribute", "relation"."""
    rng = random.Random(seed)
    nouns = sorted(set(SINGULAR.values()))
    subjects = sorted({SINGULAR[w] for w in SUBJECT_NOUNS})
    adjectives = sorted(ADJECTIVES - NOUNS)
    verbs = sorted(VERBS_BARE)
    attributes = {
        attribute_query((rng.choice(adjectives), rng.choice(nouns))) for _ in range(per_kind)
    }
    relations = {
        relation_query((rng.choice(subjects), rng.choice(verbs), rng.choice(nouns)))
        for _ in range(per_kind)
    }
    return {
        "object": [object_query(n) for n in nouns],
        "attribute": sorted(attributes),
        "relation": sorted(relations),
    }
