"""AUTO granularity: the documented rules of service/query/routing.py, one example at least each."""

from __future__ import annotations

import pytest

from service.query.routing import phrase_structure, route_text
from training.core.errors import InputError
from training.core.granularity import Granularity

OBJECT, ATTRIBUTE, RELATION, CAPTION, FULL = (
    Granularity.OBJECT,
    Granularity.ATTRIBUTE,
    Granularity.RELATION,
    Granularity.CAPTION,
    Granularity.FULL,
)

ROUTES = [
    # 7. bare noun phrases
    ("a dog", OBJECT),
    ("dogs", OBJECT),
    ("two dogs", OBJECT),
    ("a dog and a cat", OBJECT),
    ("sunset", OBJECT),  # unknown content words count as nouns
    # 6. attributes
    ("a red dog", ATTRIBUTE),
    ("the small white dog", ATTRIBUTE),
    ("a black and white dog", ATTRIBUTE),
    ("a light blue car", ATTRIBUTE),
    ("a man in a red shirt", ATTRIBUTE),  # "in" + clothing is an attribute, not a relation
    ("a girl wearing a hat", ATTRIBUTE),
    ("a woman in red", ATTRIBUTE),
    ("red", ATTRIBUTE),
    # 5. one link
    ("dog chasing a ball", RELATION),
    ("a dog on the beach", RELATION),
    ("a dog running", RELATION),
    ("a dog standing next to a car", RELATION),  # verb + multi-word preposition: one link
    ("a man in a red shirt riding a horse", RELATION),
    ("people riding bicycles", RELATION),
    # 4. two links, or a leading place
    ("a brown dog chasing a red ball on the beach", CAPTION),
    ("a cat sitting on a chair in the kitchen", CAPTION),
    ("in the park", CAPTION),
    # 3. clauses
    ("on the beach, a brown dog is chasing a red ball", CAPTION),
    ("a dog that is running", CAPTION),
    # 1. and 2.
    ("A dog runs. A cat sleeps.", FULL),
    ("the of", FULL),
]


@pytest.mark.parametrize(("query", "expected"), ROUTES)
def test_auto_routes_by_phrase_structure(query: str, expected: Granularity):
    route = route_text(query)
    assert route.granularity == expected, (query, route)
    assert route.reason


def test_reasons_name_what_the_rule_saw():
    assert "red" in route_text("a red dog").reason
    assert "chasing" in route_text("dog chasing a ball").reason
    assert "dog" in route_text("a dog").reason


def test_phrase_structure_chunks_noun_phrases_and_links():
    s = phrase_structure("a brown dog chasing a red ball on the beach")
    assert [p.head for p in s.phrases] == ["dog", "ball", "beach"]
    assert [p.attributes for p in s.phrases] == [["brown"], ["red"], []]
    assert s.links == [["chasing"], ["on"]]
    s = phrase_structure("a man in a red shirt")
    assert len(s.phrases) == 1 and s.phrases[0].attributes == ["red"] and not s.links


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_text_is_refused(text: str):
    with pytest.raises(InputError, match="empty text query"):
        route_text(text)
