"""Granularity views of real captions and their typed hard negatives (rule-based extractor)."""

from __future__ import annotations

import random

import pytest

from training.errors import InputError
from training.views.extractor import (
    VERB_GROUPS_BARE,
    CaptionViews,
    extract_views,
    make_negatives,
)

# caption -> (object, attribute, relation, attribute_words, verb, object_noun)
CASES = {
    "A black dog is running through the grass .": (
        "a dog", "a black dog", "a dog running through the grass", ("black",), "running", "grass",
    ),
    "Two children in red shirts play soccer on a field .": (
        "two children", "two children in red shirts", "two children play soccer", ("red",),
        "play", "soccer",
    ),
    "A man in a blue shirt and a woman are walking down the street .": (
        "a man", "a man in a blue shirt", "a man and a woman walking down the street", ("blue",),
        "walking", "street",
    ),
    "A group of young children playing in the snow": (
        "children", "young children", "children playing in the snow", ("young",), "playing",
        "snow",
    ),
    "A dog jumps up into the air to catch a ball .": (
        "a dog", None, "a dog jumps up into the air", (), "jumps", "air",
    ),
    "The brown dog is wet .": ("the dog", "the brown dog", None, ("brown",), None, None),
    "A little girl with long hair sits on the edge of the pool .": (
        "a girl", "a little girl with long hair", "a girl sits on the edge of the pool",
        ("little", "long"), "sits", "pool",
    ),
    "There is a man standing on a rock": (
        "a man", None, "a man standing on a rock", (), "standing", "rock",
    ),
    "An old man holds an apple .": (
        "a man", "an old man", "a man holds an apple", ("old",), "holds", "apple",
    ),
    "A man wearing a red hat sits on a bench .": (
        "a man", "a man wearing a red hat", "a man sits on a bench", ("red",), "sits", "bench",
    ),
    "A black and white dog with a ball in its mouth runs on the beach .": (
        "a dog", "a black and white dog", "a dog runs on the beach", ("black", "white"), "runs",
        "beach",
    ),
    "A German shepherd runs through the water .": (
        "a german shepherd", None, "a german shepherd runs through the water", (), "runs",
        "water",
    ),
    "Young woman standing above a crowd .": (
        "woman", "young woman", "woman standing above a crowd", ("young",), "standing", "crowd",
    ),
    "A woman in red is dancing": ("a woman", "a woman in red", "a woman dancing", ("red",),
                                  "dancing", None),
    "A boy runs away .": ("a boy", None, "a boy runs away", (), "runs", None),
    "Three people in a boat": ("three people", None, None, (), None, None),
    "A woman is wearing purple and jogging": ("a woman", None, None, (), None, None),
    "Two boys ' football teams compete on the field": (None, None, None, (), None, None),
    "Close-up of a dog": (None, None, None, (), None, None),
    "A smiling girl runs": (None, None, None, (), None, None),
}  # fmt: skip


@pytest.mark.parametrize("caption", list(CASES))
def test_views_of_realistic_captions(caption: str) -> None:
    obj, attribute, relation, attribute_words, verb, object_noun = CASES[caption]
    views = extract_views(caption)
    assert views.object == obj
    assert views.attribute == attribute
    assert views.relation == relation
    assert views.attribute_words == attribute_words
    assert views.verb == verb
    assert views.object_noun == object_noun
    assert (views.subject_noun is None) == (obj is None)


def test_subject_noun_is_the_bare_head() -> None:
    assert extract_views("Two black dogs play .").subject_noun == "dogs"
    assert extract_views("A group of people stand").subject_noun == "people"


def test_whitespace_and_trailing_period_are_normalised() -> None:
    views = extract_views("  A  black dog\tis running   through the grass .  ")
    assert views.caption == "A black dog is running through the grass"
    assert extract_views("A black dog is running through the grass.").caption == views.caption
    assert extract_views("A black dog is running through the grass").relation == views.relation


@pytest.mark.parametrize("bad", ["", "   ", " . ", None, 3, ["a dog"]])
def test_empty_or_non_string_caption_is_refused(bad: object) -> None:
    with pytest.raises(InputError, match="caption"):
        extract_views(bad)  # type: ignore[arg-type]


def _changed(caption: str, negative: str) -> list[tuple[str, str]]:
    """(old, new) word pairs that differ, ignoring a re-chosen article."""
    old, new = caption.split(), negative.split()
    assert len(old) == len(new)
    return [
        (a, b)
        for a, b in zip(old, new, strict=True)
        if a != b and {a.lower(), b.lower()} != {"a", "an"}
    ]


def test_negatives_change_exactly_their_role_word() -> None:
    views = extract_views("A black dog is running through the grass .")
    for seed in range(20):
        negatives = make_negatives(views, random.Random(seed))
        (obj,) = _changed(views.caption, negatives["object"])
        assert obj[0] == "dog" and obj[1] not in ("dog", "puppy", "animal")
        (attribute,) = _changed(views.caption, negatives["attribute"])
        assert attribute[0] == "black" and attribute[1] in {
            "white", "brown", "red", "blue", "green", "yellow", "orange", "pink", "purple", "gray",
        }  # fmt: skip
        (relation,) = _changed(views.caption, negatives["relation"])
        assert relation[0] == "running" and relation[1].endswith("ing")
        assert negatives["order"] == "A black grass is running through the dog"


def test_negatives_keep_verb_form_and_noun_number() -> None:
    views = extract_views("Two dogs play with a ball")
    for seed in range(20):
        negatives = make_negatives(views, random.Random(seed))
        (verb,) = _changed(views.caption, negatives["relation"])
        assert verb[0] == "play" and verb[1] in {g[0] for g in VERB_GROUPS_BARE} - {"play"}
        (noun,) = _changed(views.caption, negatives["object"])
        assert noun[1] in {
            "cats",
            "horses",
            "birds",
            "cows",
            "sheep",
            "goats",
            "bears",
            "ducks",
        } | {"monkeys"}
        assert negatives["order"] == "Two balls play with a dog"
    views = extract_views("A man runs on the beach")
    for seed in range(20):
        (verb,) = _changed(views.caption, make_negatives(views, random.Random(seed))["relation"])
        assert verb[1].endswith("s") and verb[1] not in ("runs", "jogs", "sprints", "races")
    views = extract_views("Two girls sing on a stage")
    (verb,) = _changed(views.caption, make_negatives(views, random.Random(0))["relation"])
    assert verb[1] in {g[0] for g in VERB_GROUPS_BARE} - {"sing"}


def test_object_negative_changes_the_kind_group() -> None:
    views = extract_views("A man in a red shirt is climbing a rock")
    swaps = {
        _changed(views.caption, make_negatives(views, random.Random(s))["object"])[0][1]
        for s in range(30)
    }
    assert swaps <= {"woman", "boy", "girl"} and len(swaps) > 1
    # a generic person word would still describe any person: it becomes an animal
    views = extract_views("A person is riding a bike")
    new = _changed(views.caption, make_negatives(views, random.Random(0))["object"])[0][1]
    assert new not in ("man", "woman", "boy", "girl", "person")


def test_article_is_rechosen_after_a_swap() -> None:
    views = extract_views("An old man holds an apple")
    assert make_negatives(views, random.Random(0))["order"] == "An old apple holds a man"


def test_negatives_are_none_when_the_role_is_absent() -> None:
    negatives = make_negatives(extract_views("The brown dog is wet"), random.Random(0))
    assert negatives["relation"] is None and negatives["order"] is None
    assert negatives["object"] is not None and negatives["attribute"] is not None
    negatives = make_negatives(extract_views("A dog runs away"), random.Random(0))
    assert negatives["attribute"] is None and negatives["order"] is None
    # an attribute word with no natural opposite is kept in the views but never swapped
    views = extract_views("A shirtless man sits")
    assert views.attribute == "a shirtless man"
    assert make_negatives(views, random.Random(0))["attribute"] is None
    negatives = make_negatives(extract_views("Close-up of a dog"), random.Random(0))
    assert set(negatives.values()) == {None}


def test_negatives_differ_from_the_caption() -> None:
    for caption in CASES:
        views = extract_views(caption)
        for seed in range(5):
            for negative in make_negatives(views, random.Random(seed)).values():
                assert negative is None or negative != views.caption


def test_negatives_are_deterministic_for_a_seeded_rng() -> None:
    views = extract_views("Two children in red shirts play soccer on a field .")
    first = make_negatives(views, random.Random(7))
    assert make_negatives(views, random.Random(7)) == first
    assert {str(make_negatives(views, random.Random(s))) for s in range(10)} != {str(first)}


def test_negatives_refuse_views_that_do_not_match_their_caption() -> None:
    views = extract_views("A black dog runs")
    forged = CaptionViews(views.caption, "a cat", None, None, "cat")
    with pytest.raises(InputError, match="extract_views"):
        make_negatives(forged, random.Random(0))
