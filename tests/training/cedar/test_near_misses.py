"""Near misses of a concept name: typos and plurals of names, words that are only runner-ups."""

from __future__ import annotations

from training.cedar.catalog import CatalogEntry
from training.cedar.near_misses import near_misses, suggestion, typo_hint


def _entry(concept: int, name: str, score: float, runner_ups: list[str]) -> CatalogEntry:
    label = f"{'-' if concept % 2 else '+'}{concept // 2}"
    return CatalogEntry(concept, label, name, score, [(w, 0.1) for w in runner_ups], 0.0)


CATALOG = [
    _entry(0, "zebras", 0.5, ["stripes"]),
    _entry(1, "horse", 0.6, ["zebra", "pony", "dog"]),
    _entry(2, "dog", 0.7, ["puppy"]),
    _entry(3, "dog", 0.3, []),
    _entry(4, "+2", 0.1, []),  # an unnamed axis: named by its label
]


def test_a_typo_finds_the_name_and_one_concept_per_name():
    found = near_misses(CATALOG, "dgo")
    assert [(e.concept, via) for e, _, via in found] == [(2, None)]  # the better-scored "dog"


def test_a_word_that_only_a_runner_up_holds_finds_its_concept_first():
    found = near_misses(CATALOG, "Zebra ")
    assert [(e.name, via) for e, _, via in found] == [("horse", "zebra"), ("zebras", None)]
    assert found[0][1] > found[1][1]


def test_a_runner_up_that_names_a_concept_is_suggested_as_that_concept():
    assert [e.concept for e, _, _ in near_misses(CATALOG, "dogg")] == [2]  # not horse via "dog"


def test_an_exact_name_unnamed_axes_and_far_words_are_not_suggested():
    assert near_misses(CATALOG, "horse") == []  # the name itself: no miss
    assert near_misses(CATALOG, "+2") == [] and near_misses(CATALOG, "xylophone") == []


def test_the_message_tail_names_each_suggestion_with_its_label():
    assert suggestion(CATALOG, "zebra") == (
        "; did you mean: horse (-0, runner-up zebra), zebras (+0)?"
    )
    assert suggestion(CATALOG, "xylophone") == "; no concept has a name near it"


def test_a_zero_shot_phrase_allowing_almost_no_rows_near_a_name_reads_as_a_typo():
    hint = typo_hint(CATALOG, "dgo", allowed=0, rows=300)
    assert hint == "'dgo' allows 0 of 300 rows as a zero-shot phrase; did you mean: dog (+1)?"
    assert typo_hint(CATALOG, "dgo", allowed=2, rows=2000) is not None  # at most 0.1 %
    assert typo_hint(CATALOG, "dgo", allowed=3, rows=2000) is None  # it allows rows: a phrase
    assert typo_hint(CATALOG, "xylophone", allowed=0, rows=300) is None  # near no name


def test_a_real_word_the_gallery_hardly_shows_is_meant_not_a_typo():
    assert typo_hint(CATALOG, "zebra", allowed=0, rows=300) is not None  # near the name zebras
    assert typo_hint(CATALOG, "zebra", allowed=0, rows=300, known={"zebra"}) is None
    # every word of the phrase must be known: one unknown word may still be a typo
    assert typo_hint(CATALOG, "striped dgo", allowed=0, rows=300, known={"striped"}) is not None
    assert typo_hint(CATALOG, "dgo", allowed=0, rows=300, known={"zebra"}) is not None


def test_a_word_concept_whose_label_is_its_word_is_suggested():
    word = CatalogEntry(9, "beacon", "beacon", 0.75, [], 0.1)
    assert [e.concept for e, _, _ in near_misses([*CATALOG, word], "beacno")] == [9]


def test_screening_by_difflibs_upper_bounds_changes_no_near_miss():
    """near_misses skips a name whose quick ratios already fall below the cutoff; on a catalog
    of many words, every word asked finds what the unscreened similarity finds."""
    import random

    from training.cedar.near_misses import NEAR_CUTOFF, name_similarity

    rng = random.Random(0)
    letters = "abcdeghilmnorstu"
    words = sorted({"".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(400)})
    catalog = [_entry(c, w, rng.random(), rng.sample(words, 2)) for c, w in enumerate(words[:300])]
    names = frozenset(e.name for e in catalog)
    for word in [*words[250:], "dgo", "zebra", "ab"]:
        found = {e.concept: (value, via) for e, value, via in near_misses(catalog, word, 1000)}
        for entry in catalog:
            value, via = name_similarity(word, entry, names)  # no floor: every ratio computed
            if entry.concept in found:
                assert found[entry.concept] == (value, via)
            elif value >= NEAR_CUTOFF and entry.name != word:  # else a better-scored namesake
                assert any(e.name == entry.name for e, _, _ in near_misses(catalog, word, 1000))
