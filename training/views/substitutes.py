"""What a hard negative may put in place of a caption's word: pools, synonym groups, fit rules.

The replacement vocabulary of training.views.negatives (canonical words only, so that a swap
never lands on a synonym) and the pure rules over the lexicon that decide which word may
replace or describe which: a noun's kind and gender, whether an attribute fits a noun, the
forms of a verb, a noun in the grammatical number of the word it replaces.
"""

from __future__ import annotations

from training.core.lexicon.nouns import (
    ANIMAL_GENERIC,
    ANIMAL_GROUP_OF,
    MASS_NOUNS,
    NOUNS,
    PERSON_GENERIC,
    PERSON_GROUP_OF,
    PERSON_ROLES,
    PLURAL_FORMS,
    SINGULAR,
    VEHICLES,
    pluralise,
    word_set,
)
from training.core.lexicon.words import (
    ADJECTIVES,
    ATTRIBUTE_CLASS_OF,
    ATTRIBUTE_CLASSES,
    DETERMINERS,
    FUNCTION_WORDS,
    VERBS_3SG,
    VERBS_BARE,
)

# Pools for negatives: canonical words only, so a swap never lands on a synonym.
PERSON_POOL = ("man", "woman", "boy", "girl")
ROLE_POOL = (
    "skier", "surfer", "snowboarder", "skateboarder", "biker", "climber", "hiker", "swimmer",
    "runner", "dancer", "musician", "wrestler", "referee", "driver", "photographer",
)  # fmt: skip
ANIMAL_POOL = ("dog", "cat", "horse", "bird", "cow", "sheep", "goat", "bear", "duck", "monkey")
VEHICLE_POOL = ("car", "truck", "bus", "train", "boat", "motorcycle", "bicycle", "tractor")
THING_POOL = (
    "ball", "stick", "rope", "kite", "frisbee", "skateboard", "umbrella", "chair", "bench",
    "fence", "rock", "tree", "car", "boat", "bucket", "box",
)  # fmt: skip
VERB_GROUPS_ING = (
    ("running", "jogging", "sprinting", "racing", "rushing"), ("jumping", "leaping", "hopping"),
    ("sitting", "seated"), ("standing",), ("walking", "strolling", "hiking"), ("playing",),
    ("swimming", "wading"), ("climbing",), ("riding",), ("holding", "carrying", "grabbing"),
    ("eating", "chewing", "biting"), ("sleeping", "resting"), ("pulling", "tugging"),
    ("pushing",), ("kicking",), ("chasing", "following"), ("throwing", "tossing"),
    ("catching",), ("looking", "watching", "staring", "gazing"), ("lying", "laying"),
    ("dancing",), ("digging",), ("drinking",), ("crawling",), ("sliding",), ("rolling",),
    ("smiling", "laughing"), ("talking", "speaking"), ("reading",), ("painting",),
    ("fighting", "wrestling"), ("hugging", "embracing", "kissing"), ("kneeling", "crouching"),
    ("splashing",), ("skiing",), ("surfing",), ("skating", "skateboarding"), ("posing",),
    ("singing",), ("driving",), ("fishing",), ("waiting",), ("cooking",), ("shopping",),
)  # fmt: skip
VERB_GROUPS_3SG = (
    ("runs", "jogs", "sprints", "races"), ("jumps", "leaps", "hops"), ("sits",), ("stands",),
    ("walks", "strolls", "hikes"), ("plays",), ("swims", "wades"), ("climbs",), ("rides",),
    ("holds", "carries", "grabs", "has"), ("eats", "chews", "bites"), ("sleeps", "rests"),
    ("pulls", "tugs"), ("pushes",), ("kicks",), ("chases", "follows"), ("throws", "tosses"),
    ("catches",), ("looks", "watches", "stares", "gazes"), ("lies", "lays"), ("dances",),
    ("digs",), ("drinks",), ("crawls",), ("slides",), ("rolls",), ("smiles", "laughs"),
    ("talks", "speaks"), ("reads",), ("paints",), ("fights", "wrestles"),
    ("hugs", "embraces", "kisses"), ("kneels", "crouches"), ("splashes",), ("skis",),
    ("surfs",), ("skates", "skateboards"), ("poses",), ("sings",), ("drives",), ("fishes",),
    ("waits",),
)  # fmt: skip
VERB_GROUPS_BARE = (
    ("run", "jog", "sprint", "race"), ("jump", "leap", "hop"), ("sit",), ("stand",),
    ("walk", "stroll", "hike"), ("play",), ("swim", "wade"), ("climb",), ("ride",),
    ("hold", "carry", "grab", "have"), ("eat", "chew", "bite"), ("sleep", "rest", "relax"),
    ("pull", "tug"), ("push",), ("kick",), ("chase", "follow"), ("throw", "toss"), ("catch",),
    ("look", "watch", "stare", "gaze"), ("lie", "lay"), ("dance",), ("dig",), ("drink",),
    ("crawl",), ("slide",), ("roll",), ("smile", "laugh"), ("talk", "speak"), ("read",),
    ("fight", "wrestle"), ("hug", "embrace", "kiss"), ("kneel", "crouch"), ("splash",),
    ("ski",), ("surf",), ("skate",), ("pose",), ("sing",), ("wait",),
)  # fmt: skip
# Negatives of the three added kinds (see negatives.make_negatives).
YOUNG_PERSONS = word_set(
    """
    boy girl child kid baby toddler infant youngster son daughter teenager teen youth"""
)
# Attribute classes that may describe a noun, by the noun's kind; colours on people only as hair
# colours, hair colours only on people.
CLASSES_BY_KIND = {
    "person": frozenset(
        ["colour", "size", "length", "age", "build", "mood", "sex", "hair", "hair colour",
         "other", "wetness", "cleanliness"]
    ),
    "animal": frozenset(
        ["colour", "shade", "pattern", "size", "length", "age", "build", "wetness",
         "cleanliness", "coat", "sex", "mood", "hair"]
    ),
    "thing": frozenset(
        ["colour", "shade", "pattern", "size", "length", "wetness", "cleanliness", "material"]
    ),
}  # fmt: skip
CLASSES_BY_KIND["young person"] = CLASSES_BY_KIND["person"] - {"age"}
CLASSES_BY_KIND["vehicle"] = CLASSES_BY_KIND["thing"]
HAIR_COLOURS = word_set("blond blonde brunette redheaded")
# Things a colour or size naturally describes ("a red ball"; not places or substances).
PROPS = word_set(
    """
    ball frisbee stick toy rope kite skateboard surfboard snowboard bat racket umbrella bag
    backpack bottle cup book sign flag tire bench chair table fence ladder bucket box blanket
    towel balloon doll tent slide swing ramp bike bicycle car truck boat kayak canoe raft
    sled wagon cart log rock pole building house door wall camera microphone phone guitar"""
)
# add_attribute draws from these, by the kind of the noun it describes.
ADDED_ATTRIBUTES = {
    "person": ("young", "old", "tall", "blond"),
    "young person": ("blond", "redheaded", "happy", "sad"),
    "animal": ("black", "white", "brown", "small", "large"),
    "vehicle": ("red", "blue", "white", "black", "small", "large"),
    "thing": ("red", "blue", "green", "yellow", "small", "large"),
}
PLURAL_AUXILIARIES = {"is": "are", "was": "were"}
# Pronouns put in the gender a negative gives the subject ("her" is read as the possessive).
PRONOUNS_OF = {
    "female": {"his": "her", "him": "her", "he": "she", "himself": "herself"},
    "male": {"her": "his", "she": "he", "herself": "himself"},
}
# Verbs whose meaning lies in their particle or object ("takes off", "gets wheel high"): no
# 'relation' negative replaces them.
LIGHT_VERBS = word_set(
    """
    take takes taking put puts putting pick picks picking get gets getting make makes making
    do does doing give gives giving turn turns turning set sets setting bring brings bringing
    have has having"""
)
IRREGULAR_BARE_FORMS = {"has": "have", "does": "do", "goes": "go"}
# Verbs a 'relation' negative may put in place of the caption's, by the verb's frame: a direct
# object of some kind ("chases a dog", "kicks a ball", "rides a bike", "plays soccer", "does a
# trick"), a preposition of motion ("runs through the grass"), of place, or nothing ("sits on the
# grass", "runs"). Bare forms; IRREGULAR_VERB_FORMS gives the others.
RELATION_FRAMES = {
    "person": ("chase", "watch", "hug", "push", "pull", "hold"),
    "animal": ("chase", "watch", "hug", "push", "pull", "hold", "ride"),
    "vehicle": ("ride", "push", "pull", "watch", "drive"),
    "prop": ("hold", "kick", "throw", "catch", "pull", "push", "watch", "chase"),
    "thing": ("watch",),
    "motion": ("run", "jump", "walk", "swim", "crawl", "slide", "roll"),
    "place": (
        "run", "jump", "walk", "swim", "crawl", "slide", "roll", "sit", "stand", "lie", "kneel",
        "sleep", "dance", "wait", "pose",
    ),
}  # fmt: skip
IRREGULAR_VERB_FORMS = {"lie": ("lies", "lying"), "catch": ("catches", "catching")}
# Words that start an object the parser does not read ("biting each other", "chases another").
OBJECT_STARTERS = DETERMINERS | word_set(
    "each another something someone it him her them one himself herself themselves"
)
MOTION_LINKS = word_set(
    "through into across down up over along past toward towards onto out off away around"
)
SPORTS = word_set(
    """
    soccer football baseball basketball tennis hockey rugby volleyball softball cricket golf
    lacrosse"""
)
# Nouns that name a group: never swapped into another role ("a person hugging other couples").
COLLECTIVE_NOUNS = word_set("couple crowd family team audience group")
# The colours and patterns an animal's coat has ("a purple dog" is no hard negative).
ANIMAL_COLOURS = word_set("black white brown tan gray grey golden blond blonde spotted striped")


def kind_of_noun(word: str) -> str:
    """ "person", "young person", "animal", "vehicle" or "thing" for a noun form."""
    noun = SINGULAR.get(word, word)
    if noun in YOUNG_PERSONS:
        return "young person"
    if noun in PERSON_GROUP_OF or noun in PERSON_ROLES or noun in PERSON_GENERIC:
        return "person"
    if noun in ANIMAL_GROUP_OF or noun in ANIMAL_GENERIC:
        return "animal"
    return "vehicle" if noun in VEHICLES else "thing"


def gender(word: str) -> str | None:
    """ "male" or "female" for a gendered person noun or sex adjective, else None."""
    group = PERSON_GROUP_OF.get(SINGULAR.get(word, word), word)
    return next((sex for sex in ("female", "male") if group.endswith(sex)), None)


def synonym_group(word: str) -> tuple[str, ...]:
    """The synonym group of an attribute word."""
    return next(g for groups in ATTRIBUTE_CLASSES.values() for g in groups if word in g)


def swappable(word: str) -> bool:
    """Whether an attribute word has a class with another synonym group to swap to."""
    return ATTRIBUTE_CLASS_OF.get(word.lower(), "other") != "other"


def fits(attribute: str, noun: str) -> bool:
    """Whether an attribute word can describe a noun (CLASSES_BY_KIND; colours on people only as
    hair colours, hair colours only on people)."""
    kind = kind_of_noun(noun)
    attribute_class = ATTRIBUTE_CLASS_OF[attribute]
    person = kind in ("person", "young person")
    if attribute_class == "colour" and (attribute in HAIR_COLOURS) != person:
        return False
    if kind == "animal" and attribute_class in ("colour", "pattern"):
        return attribute in ANIMAL_COLOURS
    if attribute_class in ("size", "length") and SINGULAR.get(noun, noun) in MASS_NOUNS:
        return False
    return attribute_class in CLASSES_BY_KIND[kind]


def takes_attributes(noun: str) -> bool:
    """Whether a noun is something a colour or size naturally describes: a person, an animal, a
    vehicle or a prop (not a place or a substance: no "the black grass")."""
    return kind_of_noun(noun) != "thing" or SINGULAR.get(noun) in PROPS


def is_plural(word: str) -> bool:
    """Whether a known noun form is plural."""
    return word in PLURAL_FORMS


def in_number_of(noun: str, slot_word: str) -> str:
    """`noun` (singular) in the grammatical number of `slot_word`; mass nouns stay as they are."""
    if is_plural(slot_word) and noun not in MASS_NOUNS:
        return pluralise(noun)
    return noun


def object_pool(word: str, object_word: str | None) -> tuple[str, ...]:
    """Candidates to replace the subject noun: same kind, another group (make_negatives)."""
    noun = SINGULAR[word]
    exclude = {SINGULAR[object_word]} if object_word else set()
    if noun in PERSON_GROUP_OF:
        group = PERSON_GROUP_OF[noun]
        pool = tuple(p for p in PERSON_POOL if PERSON_GROUP_OF[p] != group)
    elif noun in PERSON_ROLES:
        pool = tuple(p for p in ROLE_POOL if p != noun)
    elif noun in ANIMAL_GROUP_OF:
        group = ANIMAL_GROUP_OF[noun]
        pool = tuple(a for a in ANIMAL_POOL if ANIMAL_GROUP_OF[a] != group)
    elif noun in VEHICLES:
        pool = tuple(v for v in VEHICLE_POOL if v != noun and not {v, noun} <= {"bike", "bicycle"})
    elif noun in YOUNG_PERSONS:
        pool = ("man", "woman")
    elif noun in PERSON_GENERIC or noun == "person":
        pool = ANIMAL_POOL
    else:
        pool = THING_POOL
    return tuple(p for p in pool if p != noun and p not in exclude)


def companion_pool(word: str) -> tuple[str, ...]:
    """Nouns an 'add_object' negative may conjoin to a subject: its own kind, another group."""
    noun, kind = SINGULAR[word], kind_of_noun(word)
    if kind in ("person", "young person"):
        group = PERSON_GROUP_OF.get(noun)
        return tuple(p for p in PERSON_POOL if PERSON_GROUP_OF[p] != group)
    if kind == "animal":
        group = ANIMAL_GROUP_OF.get(noun)
        return tuple(a for a in ANIMAL_POOL if ANIMAL_GROUP_OF[a] != group)
    return tuple(v for v in VEHICLE_POOL if v != noun)


def verb_groups(verb: str) -> tuple[tuple[str, ...], ...]:
    """The synonym groups of verbs in the same form as `verb`."""
    if verb in VERBS_BARE:
        return VERB_GROUPS_BARE
    if verb in VERBS_3SG:
        return VERB_GROUPS_3SG
    return VERB_GROUPS_ING


def verb_forms(bare: str) -> tuple[str, str, str]:
    """A verb's bare, 3rd-person and -ing forms: "chase" -> ("chase", "chases", "chasing")."""
    if bare in IRREGULAR_VERB_FORMS:
        return (bare, *IRREGULAR_VERB_FORMS[bare])
    third = bare + ("es" if bare.endswith(("sh", "ch", "ss", "x")) else "s")
    if bare.endswith("e") and not bare.endswith("ee"):
        ing = bare[:-1] + "ing"
    elif (
        len(bare) >= 3 and bare[-1] in "bdgmnpt" and bare[-2] in "aeiou" and bare[-3] not in "aeiou"
    ):
        ing = bare + bare[-1] + "ing"
    else:
        ing = bare + "ing"
    return bare, third, ing


def bare_form(verb: str) -> str:
    """The bare form of a 3rd-person present verb: "runs" -> "run", "catches" -> "catch"."""
    if verb in IRREGULAR_BARE_FORMS:
        return IRREGULAR_BARE_FORMS[verb]
    if verb.endswith("ies"):
        return verb[:-1] if len(verb) <= 4 else verb[:-3] + "y"
    if verb.endswith(("sses", "shes", "ches", "xes", "zzes")):
        return verb[:-2]
    return verb[:-1]


def is_third_person_verb(word: str) -> bool:
    """Whether a word after "and" reads as a 3rd-person present verb: a known one, or an unknown
    word in -s that is no noun ("and pretends")."""
    if word in VERBS_3SG:
        return True
    unknown = word not in NOUNS and word not in FUNCTION_WORDS and word not in ADJECTIVES
    return unknown and word.endswith("s") and not word.endswith("ss") and word.isalpha()
