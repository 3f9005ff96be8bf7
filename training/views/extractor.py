"""Rule-based granularity views of real (Flickr8k-style) captions, read off their parse.

Views (lower-case), from training.views.parse's roles:

    object     determiner + subject head noun                  "a dog"
    attribute  the subject noun phrase with its attribute(s)   "a black dog", "a man in a red shirt"
               (None when the subject has no attribute word)
    relation   subject + verb (+ preposition + object head)    "a dog running through the grass"
               (None when no verb follows the subject)

A role the parse leaves empty gives None rather than a guess. training.views.negatives edits
the same parse into typed hard negatives.
"""

from __future__ import annotations

from dataclasses import dataclass

from training.core.lexicon.words import article
from training.views.parse import (
    NounPhrase,
    Parse,
    modifier_attributes,
    normalise_caption,
    parse_caption,
)


@dataclass(frozen=True)
class CaptionViews:
    """A caption's language view at each granularity and the words that fill each role."""

    caption: str
    object: str | None
    attribute: str | None
    relation: str | None
    subject_noun: str | None
    attribute_words: tuple[str, ...] = ()
    verb: str | None = None
    object_noun: str | None = None


def extract_views(caption: str) -> CaptionViews:
    """The object, attribute and relation views of a caption (see the module docstring).

    Fields are None where the caption has no such role or fits no rule.
    """
    text = normalise_caption(caption)
    return views_of(parse_caption(text), text)


def _head_with_determiner(low: list[str], phrase: NounPhrase) -> str:
    """ "a dog", "two children", "people" (quantity phrases drop their "a group of")."""
    head = low[phrase.head]
    if phrase.breed is not None:
        head = f"{low[phrase.breed]} {head}"
    if phrase.det is None:
        return head
    return f"{article(low[phrase.det], head)} {head}"


def views_of(parse: Parse, text: str) -> CaptionViews:
    """The CaptionViews of a parse."""
    low = [w.lower() for w in parse.words]
    subject = parse.subject
    if subject is None:
        return CaptionViews(text, None, None, None, None)
    object_view = _head_with_determiner(low, subject)
    attribute_indices = subject.attributes + modifier_attributes(parse)
    attribute_view = None
    if attribute_indices:
        body_start = subject.det + 1 if subject.det is not None else subject.start
        if subject.quantity:
            body_start = (
                subject.start + 3 if low[subject.start] in ("a", "an") else subject.start + 2
            )
            if low[body_start] in ("the", "these", "those"):
                body_start += 1
        body = low[body_start : subject.end]
        for start, end in parse.modifier_spans:
            body += low[start:end]
        if subject.det is not None:
            body = [article(low[subject.det], body[0]), *body]
        attribute_view = " ".join(body)
    relation_view = None
    verb = object_noun = None
    if parse.verb is not None:
        verb = low[parse.verb]
        parts = [object_view]
        if parse.conjunct is not None:
            parts += ["and", _head_with_determiner(low, parse.conjunct)]
        parts.append(verb)
        parts += [low[k] for k in parse.link]
        if parse.object is not None:
            object_noun = low[parse.object.head]
            parts.append(_head_with_determiner(low, parse.object))
        relation_view = " ".join(parts)
    return CaptionViews(
        caption=text,
        object=object_view,
        attribute=attribute_view,
        relation=relation_view,
        subject_noun=low[subject.head],
        attribute_words=tuple(low[k] for k in attribute_indices),
        verb=verb,
        object_noun=object_noun,
    )
