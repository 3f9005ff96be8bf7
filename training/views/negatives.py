"""Typed hard negatives of real captions: seven kinds (SugarCrepe's), each an edit of the parse.

`make_negatives` edits a caption's parse (training.views.parse) into hard negatives of seven
kinds (NEGATIVE_KINDS; see its docstring), each a fluent sentence or None, drawing replacement
words from training.views.substitutes; their hand-judged precision is in NEGATIVES_PRECISION.md.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from training.core.errors import InputError
from training.core.lexicon.nouns import NOUNS, SINGULAR
from training.core.lexicon.words import (
    ADJECTIVE_LINKS,
    ATTRIBUTE_CLASS_OF,
    ATTRIBUTE_CLASSES,
    VERBS_3SG,
    article,
)
from training.views.extractor import CaptionViews, views_of
from training.views.parse import (
    NounPhrase,
    Parse,
    lower_words,
    modifier_attributes,
    parse_caption,
    word_at,
)
from training.views.substitutes import (
    ADDED_ATTRIBUTES,
    COLLECTIVE_NOUNS,
    LIGHT_VERBS,
    MOTION_LINKS,
    OBJECT_STARTERS,
    PLURAL_AUXILIARIES,
    PRONOUNS_OF,
    PROPS,
    RELATION_FRAMES,
    SPORTS,
    bare_form,
    companion_pool,
    fits,
    gender,
    in_number_of,
    is_plural,
    is_third_person_verb,
    kind_of_noun,
    object_pool,
    swappable,
    synonym_group,
    takes_attributes,
    verb_forms,
    verb_groups,
)

NEGATIVE_KINDS = (
    "object",
    "attribute",
    "relation",
    "order",
    "swap_attribute",
    "add_object",
    "add_attribute",
)


def make_negatives(views: CaptionViews, rng: random.Random) -> dict[str, str | None]:
    """Hard negatives of the full caption of seven kinds (SugarCrepe's), each a fluent sentence
    made from the caption's own parse, None where the kind cannot be made fluently.

    The four kinds the compositional corpus also has keep its names:
    'object' (replace object): the subject head noun replaced by a noun of another kind-mate
    group: a man/woman/boy/girl word by one of another gender or age; a role noun ("skier") by
    another role; a generic person word ("person", "child", which any person word would still
    describe) by an animal; an animal by another animal; a vehicle by another vehicle.
    Grammatical number kept.
    'attribute' (replace attribute): one attribute word replaced by a word of the same class from
    another synonym group (colour<->colour, size<->size, ...); None when none can be swapped.
    'relation' (replace relation): the verb replaced by a verb of another synonym group in the
    same form (-ing stays -ing, "runs" stays 3rd person, "run" stays bare).
    'order' (swap objects): subject and object nouns swapped, each taking the number of the place
    it moves to; only when the object is itself a person, animal or vehicle ("a man rides a
    horse" -> "a horse rides a man"), since "the grass runs through the dog" is no sentence a
    caption could be confused with.
    Three kinds are new:
    'swap_attribute': an attribute word of the subject (or of its clothing, "a man in a red shirt")
    exchanged with one of the object's or of the second subject's ("a black dog chases a white
    cat" -> "a white dog chases a black cat"); when only the subject has one, a pre-nominal
    attribute moves to a bare object ("a black dog chases a cat" -> "a dog chases a black cat").
    Only words of different synonym groups, each fitting the noun it lands on (no "a wooden dog",
    no "a young ball", no colours on people but hair colours).
    'add_object': a second subject conjoined, "a dog runs" -> "a dog and a cat run", the verb put
    in agreement (3rd person -> bare, "is" -> "are", "there is" -> "there are"); a noun of the
    subject's kind (persons, animals, vehicles) that the caption does not mention.
    'add_attribute': an attribute word put before the noun of a bare subject or object phrase
    ("a dog runs" -> "a black dog runs", "a man holds a ball" -> "an old man holds a ball"),
    from a small list that fits the noun's kind.
    Every edit re-chooses an "a"/"an" before the words it touches; every non-None negative
    differs from views.caption; the same rng state gives the same negatives.
    """
    parse = parse_caption(views.caption)
    if views_of(parse, views.caption) != views:
        raise InputError("views do not match their caption; make them with extract_views")
    return {
        "object": _replace_object(parse, rng),
        "attribute": _replace_attribute(parse, rng),
        "relation": _replace_relation(parse, rng),
        "order": _swap_objects(parse),
        "swap_attribute": _swap_attribute(parse, rng),
        "add_object": _add_object(parse, rng),
        "add_attribute": _add_attribute(parse, rng),
    }


def _replace_object(parse: Parse, rng: random.Random) -> str | None:
    """The 'object' negative (see make_negatives)."""
    subject, obj, low = parse.subject, parse.object, lower_words(parse)
    if subject is None:
        return None
    noun = low[subject.head]
    pool = tuple(
        candidate
        for candidate in object_pool(noun, low[obj.head] if obj else None)
        if all(fits(low[i], candidate) for i in subject.attributes)
        and not (parse.modifier_spans and kind_of_noun(candidate) == "animal")
    )  # no "an old girl", no "bears in summer clothes"
    replacement = _pick(pool, rng)
    if replacement is None:
        return None
    edits = {subject.head: (in_number_of(replacement, noun),)}
    if subject.breed is not None:
        edits[subject.breed] = ()
    edits.update(_pronouns_after(parse, gender(noun), gender(replacement)))
    return _rewrite(parse.words, edits)


def _pronouns_after(
    parse: Parse, before: str | None, after: str | None
) -> dict[int, tuple[str, ...]]:
    """Edits that put the pronouns after a singular subject in its new gender ("a man ... his
    glasses" -> "a woman ... her glasses"); none when the gender does not change."""
    if parse.subject is None or before is None or after is None or before == after:
        return {}
    if _is_plural_subject(parse):
        return {}
    low = lower_words(parse)
    change = PRONOUNS_OF[after]
    return {k: (change[w],) for k in range(parse.subject.end, len(low)) if (w := low[k]) in change}


def _subject_attributes(parse: Parse) -> list[int]:
    """Indices of the subject's attribute words, pre-nominal then in its post-modifiers."""
    return parse.subject.attributes + modifier_attributes(parse) if parse.subject else []


def _replace_attribute(parse: Parse, rng: random.Random) -> str | None:
    """The 'attribute' negative (see make_negatives): one of the subject's attribute words, and in
    its place, from another synonym group of its class, the group's first word that fits the noun
    it describes and is not in the caption already."""
    low = lower_words(parse)
    present = set(low)
    options = [
        (index, choice)
        for index in _subject_attributes(parse)
        if swappable(low[index])
        for group in ATTRIBUTE_CLASSES[ATTRIBUTE_CLASS_OF[low[index]]]
        if low[index] not in group
        and (choice := next((w for w in group if fits(w, _attribute_noun(parse, index))), None))
        and choice not in present
    ]
    if not options:
        return None
    index, choice = options[rng.randrange(len(options))]
    gender_change = _pronouns_after(parse, gender(low[index]), gender(choice))
    return _rewrite(parse.words, {index: (choice,), **gender_change})


def _replace_relation(parse: Parse, rng: random.Random) -> str | None:
    """The 'relation' negative (see make_negatives): a verb of another synonym group that fits
    the verb's frame (RELATION_FRAMES), so that "a dog runs on the grass" may become "a dog sits
    on the grass" but not "a dog kicks on the grass", nor "a man throws a motorbike"."""
    if parse.verb is None or lower_words(parse)[parse.verb] in LIGHT_VERBS:
        return None
    verb = lower_words(parse)[parse.verb]
    frame = {form for bare in RELATION_FRAMES[_relation_frame(parse)] for form in verb_forms(bare)}
    groups = verb_groups(verb)
    pool = tuple(w for g in groups if verb not in g for w in g if w in frame)
    choice = _pick(pool, rng)
    return None if choice is None else _rewrite(parse.words, {parse.verb: (choice,)})


def _relation_frame(parse: Parse) -> str:
    """The RELATION_FRAMES key of the caption's verb."""
    low = lower_words(parse)
    obj = parse.object
    if obj is not None and not parse.link:
        noun = low[obj.head]
        if SINGULAR[noun] in SPORTS:
            return "thing"
        kind = kind_of_noun(noun)
        if kind in ("person", "young person"):
            return "person"
        if kind == "thing":
            return "prop" if SINGULAR[noun] in PROPS else "thing"
        return kind
    if any(low[k] in MOTION_LINKS for k in parse.link):
        return "motion"
    after = word_at(low, parse.verb + 1) if parse.verb is not None else ""
    if not parse.link and after in OBJECT_STARTERS:
        return "person"  # an object the parser does not read: "biting each other"
    return "place"


def _swap_objects(parse: Parse) -> str | None:
    """The 'order' negative (see make_negatives)."""
    subject, obj, low = parse.subject, parse.object, lower_words(parse)
    if subject is None or obj is None:
        return None
    s_word, o_word = low[subject.head], low[obj.head]
    s_noun, o_noun = SINGULAR[s_word], SINGULAR[o_word]
    alive = ("person", "young person", "animal")
    if (
        s_noun == o_noun
        or kind_of_noun(s_word) not in alive
        or kind_of_noun(o_word) not in alive
        or {s_noun, o_noun} & COLLECTIVE_NOUNS
        or not all(fits(low[i], o_noun) for i in subject.attributes)
        or not all(fits(low[i], s_noun) for i in obj.attributes)
        or (parse.modifier_spans and "animal" in (kind_of_noun(s_word), kind_of_noun(o_word)))
    ):  # no "an old kid", no "pigeons in uniforms"
        return None
    edits = {
        subject.head: (in_number_of(o_noun, s_word),),
        obj.head: (in_number_of(s_noun, o_word),),
    }
    for breed in (subject.breed, obj.breed):
        if breed is not None:
            edits[breed] = ()
    return _rewrite(parse.words, edits)


def _swap_attribute(parse: Parse, rng: random.Random) -> str | None:
    """The 'swap_attribute' negative (see make_negatives)."""
    subject, low = parse.subject, lower_words(parse)
    if subject is None:
        return None
    own = _subject_attributes(parse)
    own_words = {low[k] for k in own}
    partners = [p for p in (parse.conjunct, parse.object) if p is not None]
    swaps = [
        {i: (low[j],), j: (low[i],)}
        for partner in partners
        for i in own
        for j in partner.attributes
        if synonym_group(low[i]) != synonym_group(low[j])
        and low[i] not in {low[k] for k in partner.attributes}
        and low[j] not in own_words
        and fits(low[i], low[partner.head])
        and fits(low[j], _attribute_noun(parse, i))
    ]
    if swaps:
        return _rewrite(parse.words, swaps[rng.randrange(len(swaps))])
    moves = [
        {i: (), _first_noun(low, partner): (low[i], parse.words[_first_noun(low, partner)])}
        for partner in partners
        if not partner.attributes and takes_attributes(low[partner.head])
        for i in subject.attributes
        if word_at(low, i - 1) not in ADJECTIVE_LINKS
        and word_at(low, i + 1) not in ADJECTIVE_LINKS
        and fits(low[i], low[partner.head])
    ]
    return _rewrite(parse.words, moves[rng.randrange(len(moves))]) if moves else None


def _attribute_noun(parse: Parse, index: int) -> str:
    """The noun an attribute word of the subject describes: the subject head, or the clothing
    noun of the post-modifier it sits in ("red" of "a man in a red shirt" -> "shirt"; "red" of
    "a woman in red" -> "clothing")."""
    low = lower_words(parse)
    for start, end in parse.modifier_spans:
        if start <= index < end:
            return next((low[k] for k in range(index, end) if low[k] in NOUNS), "clothing")
    return low[parse.subject.head] if parse.subject else ""


def _first_noun(low: list[str], phrase: NounPhrase) -> int:
    """Where an adjective goes in a phrase: before its breed modifier or its first noun
    ("a football player" -> before "football")."""
    if phrase.breed is not None:
        return phrase.breed
    k = phrase.head
    while k - 1 >= phrase.start and low[k - 1] in NOUNS and k - 1 != phrase.det:
        k -= 1
    return k


def _add_object(parse: Parse, rng: random.Random) -> str | None:
    """The 'add_object' negative (see make_negatives)."""
    subject, low = parse.subject, lower_words(parse)
    if subject is None or parse.verb is None or parse.conjunct is not None:
        return None
    if "and" in low[subject.start : parse.subject_end]:  # "a man in a shirt and cap and a girl"
        return None
    mentioned = {SINGULAR[w] for w in low if w in SINGULAR}
    noun = _pick(tuple(n for n in companion_pool(low[subject.head]) if n not in mentioned), rng)
    if noun is None:
        return None
    at = parse.subject_end
    edits: dict[int, tuple[str, ...]] = {}
    if parse.auxiliary is not None:
        edits[parse.auxiliary] = (
            PLURAL_AUXILIARIES.get(low[parse.auxiliary], low[parse.auxiliary]),
        )
    elif low[parse.verb] in VERBS_3SG and not _is_plural_subject(parse):
        edits[parse.verb] = (bare_form(low[parse.verb]),)
        for k in range(parse.verb + 2, len(low)):  # "holds a microphone and speaks"
            if low[k - 1] == "and" and is_third_person_verb(low[k]):
                edits[k] = (bare_form(low[k]),)
    if low[:2] == ["there", "is"]:
        edits[1] = ("are",)
    following = edits.get(at, (parse.words[at],))
    edits[at] = ("and", article("a", noun), noun, *following)
    return _rewrite(parse.words, edits)


def _is_plural_subject(parse: Parse) -> bool:
    """Whether the subject phrase is plural ("dogs", "a group of people")."""
    subject = parse.subject
    return subject is not None and (is_plural(lower_words(parse)[subject.head]) or subject.quantity)


def _add_attribute(parse: Parse, rng: random.Random) -> str | None:
    """The 'add_attribute' negative (see make_negatives)."""
    subject, low = parse.subject, lower_words(parse)
    if subject is None:
        return None
    phrases = []
    if not _subject_attributes(parse):
        phrases.append(subject)
    obj = parse.object
    if obj is not None and not obj.attributes and takes_attributes(low[obj.head]):
        phrases.append(obj)
    present = set(low)
    edits = [
        {_first_noun(low, phrase): (word, parse.words[_first_noun(low, phrase)])}
        for phrase in phrases
        for word in ADDED_ATTRIBUTES[kind_of_noun(low[phrase.head])]
        if not present & set(synonym_group(word))
    ]
    return _rewrite(parse.words, edits[rng.randrange(len(edits))]) if edits else None


def _pick(pool: tuple[str, ...], rng: random.Random) -> str | None:
    """One word of the pool drawn with rng, or None for an empty pool."""
    return pool[rng.randrange(len(pool))] if pool else None


def _rewrite(words: list[str], edits: Mapping[int, tuple[str, ...]]) -> str:
    """The caption with the word at each edited index replaced by the edit's words (none: the word
    is dropped; several: words inserted), the first word capitalised as it was, and an "a"/"an"
    before every place an edit touched re-chosen ("a old man" -> "an old man", "an [old] man" ->
    "a man")."""
    out: list[str] = []
    touched: list[bool] = []
    pending = False
    for index, word in enumerate(words):
        if index not in edits:
            out.append(word)
            touched.append(pending)
            pending = False
            continue
        new = list(edits[index])
        if index == 0:
            new = [w.lower() for w in new]
        out += new
        touched += [True] * len(new)
        pending = not new
    for k in range(1, len(out)):
        if touched[k] and out[k - 1].lower() in ("a", "an"):
            chosen = article(out[k - 1].lower(), out[k].lower())
            out[k - 1] = chosen.capitalize() if out[k - 1][:1].isupper() else chosen
    if out and words[0][:1].isupper():
        out[0] = out[0][:1].upper() + out[0][1:]
    return " ".join(out)
