"""Granularity views of real captions and their typed hard negatives (rule-based extractor)."""

from __future__ import annotations

import itertools
import random

import pytest

from training.core.errors import InputError
from training.views.extractor import CaptionViews, extract_views
from training.views.negatives import NEGATIVE_KINDS, make_negatives
from training.views.substitutes import VERB_GROUPS_BARE

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
        # colours a dog's coat can have, one word per synonym group
        assert attribute[0] == "black" and attribute[1] in {"white", "brown", "golden", "gray"}
        (relation,) = _changed(views.caption, negatives["relation"])
        # "through the grass" asks for a verb of motion
        assert relation[0] == "running" and relation[1] in {
            "jumping",
            "walking",
            "swimming",
            "crawling",
            "sliding",
            "rolling",
        }
        assert negatives["order"] is None  # "the grass is running through the dog" is no caption


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
            "monkeys",
        }
    views = extract_views("Two dogs chase a cat")
    assert make_negatives(views, random.Random(0))["order"] == "Two cats chase a dog"
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
    views = extract_views("An old man chases a dog")
    negatives = make_negatives(views, random.Random(0))
    assert negatives["order"] == "An old dog chases a man"
    assert negatives["swap_attribute"] == "A man chases an old dog"


def test_negatives_are_none_when_the_role_is_absent() -> None:
    negatives = make_negatives(extract_views("The brown dog is wet"), random.Random(0))
    assert negatives["relation"] is None and negatives["order"] is None
    assert negatives["add_object"] is None  # no verb to put in agreement
    assert negatives["object"] is not None and negatives["attribute"] is not None
    negatives = make_negatives(extract_views("A dog runs away"), random.Random(0))
    assert negatives["attribute"] is None and negatives["order"] is None
    assert negatives["swap_attribute"] is None and negatives["add_attribute"] is not None
    # an attribute word with no natural opposite is kept in the views but never swapped
    views = extract_views("A shirtless man sits")
    assert views.attribute == "a shirtless man"
    assert make_negatives(views, random.Random(0))["attribute"] is None
    negatives = make_negatives(extract_views("Close-up of a dog"), random.Random(0))
    assert set(negatives.values()) == {None}
    assert set(negatives) == set(NEGATIVE_KINDS)


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


# --- the three added kinds and the fluency of every kind ------------------------------------


def _all_negatives(caption: str, kind: str, seeds: int = 30) -> set[str | None]:
    views = extract_views(caption)
    return {make_negatives(views, random.Random(s))[kind] for s in range(seeds)}


@pytest.mark.parametrize(
    ("caption", "expected"),
    [
        ("A black dog chases a white cat", {"A white dog chases a black cat"}),
        # the subject's attribute may sit in its clothing
        (
            "A man in a red shirt holds a blue umbrella",
            {"A man in a blue shirt holds a red umbrella"},
        ),
        # only the subject has one: it moves to a bare object, articles re-chosen
        ("A black dog catches a frisbee", {"A dog catches a black frisbee"}),
        (
            "A young man and a woman walk down the street",
            {"A man and a young woman walk down the street"},
        ),
        ("Black dogs chase a cat", {"Dogs chase a black cat"}),
        # near-synonyms are no swap; an object that already has one takes no second
        ("A small dog chases a little cat", {None}),
        # neither "a young ball" nor "a red man"
        ("A young man kicks a red ball", {None}),
        # no colour moves onto a place or substance
        ("A black dog runs on the grass", {None}),
        ("A dog runs", {None}),
    ],
)
def test_swap_attribute(caption: str, expected: set[str | None]) -> None:
    assert _all_negatives(caption, "swap_attribute") == expected


def test_add_object_conjoins_a_noun_of_the_same_kind_and_fixes_the_verb() -> None:
    added = _all_negatives("A dog runs on the grass", "add_object")
    assert {f"A dog and a {a} run on the grass" for a in ("cat", "horse", "bird")} <= added
    assert all(n is not None and n.endswith(" run on the grass") for n in added)
    assert not any("and a dog" in n or "a puppy" in n for n in added if n)
    assert _all_negatives("A black dog is running", "add_object") >= {
        "A black dog and a cat are running"
    }
    assert all(
        n is not None and n.startswith("There are a man and a ") and n.endswith(" standing")
        for n in _all_negatives("There is a man standing", "add_object")
    )
    assert _all_negatives("Two dogs play", "add_object") >= {"Two dogs and a cat play"}
    assert {
        n.split()[4] if n else None
        for n in _all_negatives("A man holds a cup and smiles", "add_object")
    } <= {"woman", "boy", "girl"}
    assert all(
        n is not None and n.endswith(" hold a cup and smile")
        for n in _all_negatives("A man holds a cup and smiles", "add_object")
    )
    assert all(
        n is not None and n.endswith(" catch a ball")
        for n in _all_negatives("A boy catches a ball", "add_object")
    )
    # nothing the caption already mentions; no verb, or a second subject already: None
    assert all(
        n.split()[4] != "dog" for n in _all_negatives("A man walks a dog", "add_object") if n
    )
    assert _all_negatives("The brown dog is wet", "add_object") == {None}
    assert _all_negatives("A man and a woman walk", "add_object") == {None}


def test_add_attribute_fits_the_noun_and_fixes_the_article() -> None:
    assert _all_negatives("A dog runs", "add_attribute") == {
        f"A {a} dog runs" for a in ("black", "white", "brown", "small", "large")
    }
    assert _all_negatives("A man runs", "add_attribute") == {
        "A young man runs",
        "An old man runs",
        "A tall man runs",
        "A blond man runs",
    }
    # no age on a child, no second attribute, the first word capitalised
    assert "A young boy runs" not in _all_negatives("A boy runs", "add_attribute")
    assert _all_negatives("Dogs run", "add_attribute") == {
        f"{a.capitalize()} dogs run" for a in ("black", "white", "brown", "small", "large")
    }
    assert _all_negatives("A black dog catches a frisbee", "add_attribute") == {
        f"A black dog catches a {a} frisbee" for a in ("red", "blue", "green", "yellow", "small")
    } | {"A black dog catches a large frisbee"}
    assert _all_negatives("A black dog chases a white cat", "add_attribute") == {None}
    assert _all_negatives("A black dog runs on the grass", "add_attribute") == {None}


def test_replace_attribute_fits_the_noun() -> None:
    # a person's colour is a hair colour
    assert _all_negatives("A blonde girl runs", "attribute") == {
        "A brunette girl runs",
        "A redheaded girl runs",
    }
    # "curly hair" has no other hair-class word a head of hair can take
    assert _all_negatives("A small child with curly hair sits", "attribute") == {
        "A large child with curly hair sits"
    }


def test_gendered_replacements_carry_the_pronouns() -> None:
    for negative in _all_negatives("A man takes off his hat", "object"):
        assert negative is not None
        new = negative.split()[1]
        assert ("her hat" in negative) == (new in ("woman", "girl"))
    assert _all_negatives("A male hiker carries his gear", "attribute") == {
        "A female hiker carries her gear"
    }


def test_replace_relation_fits_the_verb_frame() -> None:
    # a direct object of a kind: what one does to a horse, never "sits a horse"
    verbs = {n.split()[2] for n in _all_negatives("A man rides a horse", "relation") if n}
    assert verbs and verbs <= {"chases", "watches", "hugs", "pushes", "pulls", "holds"}
    assert _all_negatives("Boys play soccer", "relation") == {"Boys watch soccer"}
    verbs = {n.split()[2] for n in _all_negatives("A dog sleeps on the grass", "relation") if n}
    assert verbs and not verbs & {"chases", "kicks", "holds", "throws", "catches"}
    assert _all_negatives("A man takes off his hat", "relation") == {None}


def test_swap_objects_needs_two_living_things_that_fit_their_new_words() -> None:
    assert _all_negatives("A man rides a horse", "order") == {"A horse rides a man"}
    assert _all_negatives("A man drives a car", "order") == {None}
    assert _all_negatives("An old man holds a little girl", "order") == {None}  # "an old girl"
    assert _all_negatives("A man in a red shirt walks a dog", "order") == {None}


HAND_WRITTEN = [
    "A black dog chases a white cat",
    "An old man rides a brown horse on the beach",
    "Two children in red shirts play soccer on a field",
    "A girl in a pink dress is jumping on a trampoline",
    "There is a man standing on a rock",
    "A little boy holds a ball and smiles",
    "Dogs run through the snow",
]


@pytest.mark.parametrize("caption", [*CASES, *HAND_WRITTEN])
def test_every_negative_is_fluent_and_differs(caption: str) -> None:
    views = extract_views(caption)
    for seed in range(10):
        for kind, negative in make_negatives(views, random.Random(seed)).items():
            if negative is None:
                continue
            words = negative.lower().split()
            assert negative != views.caption, kind
            assert all(a != b for a, b in itertools.pairwise(words)), (kind, negative)
            for article, following in itertools.pairwise(words):
                if article in ("a", "an") and following[0] in "bcdfgkmprstvwz":
                    assert article == "a", (kind, negative)
                if article in ("a", "an") and following[0] in "aeio":
                    assert article == "an", (kind, negative)
            assert negative[0].isupper() == views.caption[0].isupper(), (kind, negative)


def test_precision_sample_of_negatives_and_yields(tmp_path) -> None:
    from training.views.precision_sample import negative_yields, negatives_table, read_captions

    lines = [
        "a.jpg#0\tA black dog chases a white cat .",
        "a.jpg#1\tA dog runs on the grass .",
        "b.jpg#0\tClose-up of a dog",
        "b.jpg#1\tA man rides a horse",
    ]
    token_file = tmp_path / "Flickr8k.token.txt"
    token_file.write_text("\n".join(lines) + "\n")
    captions = read_captions(token_file)
    yields = negative_yields(captions)
    assert list(yields) == list(NEGATIVE_KINDS)
    assert yields["order"] == 2 and yields["swap_attribute"] == 1 and yields["object"] == 3
    table = negatives_table(captions, seed=0, per_kind=1).splitlines()
    assert len(table) == 2 + len(NEGATIVE_KINDS)  # one of each kind, here
    assert [row.split(" | ")[1] for row in table[2:]] == list(NEGATIVE_KINDS)
    assert negatives_table(captions, seed=0, per_kind=1) == "\n".join(table)
