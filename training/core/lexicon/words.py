"""The caption lexicon's other word classes, a word's class, and the English "a"/"an" rule.

Determiners, attribute adjectives (by class, in groups of near-synonyms), verb forms,
prepositions, particles and function words, derived by reading the Flickr8k captions. Shared
like training.core.lexicon.nouns; imports nothing else of Strata.
"""

from __future__ import annotations

from training.core.lexicon.nouns import SINGULAR, word_set

DETERMINERS = word_set(
    """
    a an the one two three four five six seven eight nine ten several some many few
    this that these those his her its their another both each"""
)
NUMBER_WORDS = word_set("one two three four five six seven eight nine ten several")
POSSESSIVES = word_set("his her its their")
# Adjectives that carry an attribute, by class; each inner tuple is a group of near-synonyms,
# and an attribute negative takes a word from another group of the same class.
ATTRIBUTE_CLASSES: dict[str, tuple[tuple[str, ...], ...]] = {
    "colour": (
        ("black",), ("white",), ("brown", "tan", "beige", "brunette"), ("red", "redheaded"),
        ("blue",), ("green",), ("yellow", "golden", "gold", "blond", "blonde"), ("orange",),
        ("pink",), ("purple",), ("gray", "grey", "silver"),
    ),
    "shade": (("dark",), ("light", "pale"), ("bright", "brightly")),
    "pattern": (
        ("striped",), ("spotted",), ("plaid",), ("checkered",), ("colorful", "multicolored"),
        ("flowered", "floral"),
    ),
    "size": (("small", "little", "tiny", "smaller"), ("large", "big", "huge", "giant", "larger")),
    "length": (("long", "tall"), ("short",)),
    "age": (("young", "younger", "teenage"), ("old", "older", "elderly")),
    "build": (("fat", "chubby", "overweight"), ("thin", "skinny", "slim"), ("muscular",)),
    "wetness": (("wet", "soaked", "soaking"), ("dry",)),
    "cleanliness": (("muddy", "dirty"), ("clean",)),
    "coat": (("fluffy", "furry", "shaggy", "hairy", "scruffy"), ("sleek", "smooth")),
    "hair": (("long-haired",), ("short-haired",), ("curly", "curly-haired")),
    "hair colour": (
        ("blond-haired", "blonde-haired"), ("dark-haired", "black-haired"), ("brown-haired",),
        ("red-haired",), ("gray-haired", "grey-haired", "white-haired"),
    ),
    "sex": (("male",), ("female",)),
    "mood": (("happy", "cheerful"), ("sad", "upset"), ("angry",)),
    "material": (
        ("wooden",), ("metal",), ("plastic",), ("leather",), ("stone",), ("brick",),
        ("concrete", "cement"), ("denim",), ("rubber",),
    ),
    # visual attributes with no natural opposite: kept in the views, never swapped
    "other": (
        ("shirtless", "topless", "bald", "bearded", "barefoot", "naked", "tattooed",
         "muzzled", "helmeted", "pregnant", "masked", "costumed", "uniformed", "bare-chested"),
    ),
}  # fmt: skip
# Adjectives allowed inside a noun phrase that are not attributes of the thing itself.
PLAIN_ADJECTIVES = word_set(
    """
    lone other same single professional local standard medium opposing"""
)
# Words that may sit inside an adjective run: "black and white", "dark haired", "very small".
ADJECTIVE_LINKS = frozenset(["and", "haired", "colored", "coloured", "very"])
# "german shepherd", "golden retriever": the adjective is part of the breed name.
BREED_MODIFIERS = {
    "german": ("shepherd", "shepherds"),
    "golden": ("retriever", "retrievers"),
    "border": ("collie", "collies"),
    "pit": ("bull", "bulls"),
    "great": ("dane", "danes"),
    "labrador": ("retriever", "retrievers"),
    "jack": ("russell",),
}
AUXILIARIES = frozenset(["is", "are", "was", "were"])
ADVERBS = frozenset(["happily", "playfully", "quickly", "also", "just", "slowly", "all"])
VERBS_3SG = word_set(
    """
    jumps runs stands sits plays rides walks holds has does leaps looks climbs carries
    catches chases takes swims wears performs swings poses slides gets flies makes smiles tries
    splashes hangs lays pushes lies goes throws kicks watches surfs skateboards leans hits
    dances prepares eats bites shakes attempts enjoys skis helps drinks reaches races puts
    rolls pulls falls blows talks reads dives grinds chews uses shows retrieves kneels drives
    balances scales waits raises paddles leads laughs gives digs crouches crawls wades touches
    sniffs skates rows points kisses flips dribbles sticks sings pours emerges crosses bounds
    paints licks comes begins barks turns sprints rests passes opens lifts jogs grabs fishes
    appears steps spins sleeps shoots practices pounces peeks parasails launches lands kayaks
    juggles hikes fetches descends bends works windsurfs waves trots treads tosses teaches
    stops stares squats skips returns picks pauses hugs hops hides follows bounces approaches
    wipes waterskis wakeboards travels tackles snowboards smokes sleds shovels screams nears
    glides floats embraces cries ascends wrestles twirls tugs treks stretches steers sprays
    speeds speaks soars sells rollerblades pokes peers participates moves lunges listens
    gazes frolics flings interviews examines dunks defends crashes clings brings blocks bikes
    carries cuts feeds fights kneels licks marches plays sniffs strolls sunbathes swims watches"""
)
VERBS_BARE = word_set(
    """
    play run stand sit walk ride jump look pose wrestle fight race hold climb chase watch
    wait have take dance smile hang gather wear make enjoy do try participate talk swing pull
    laugh huddle carry splash lean drink swim lay kick go wade tug slide leap hug work read
    raise put hike eat throw stop stare share perform move lie fly fall examine embrace drive
    bite attempt tackle sunbathe sniff skate show shovel rest relax prepare peek pass meet
    lounge follow celebrate bounce battle bathe compete cross push paddle dig sing kiss march
    stroll ski surf sled hop skip roll catch crouch kneel point grab pet"""
)
# -ing words that are nouns; any other "-ing" word with a vowel before the suffix is a verb form.
ING_NOUNS = word_set(
    """
    building clothing ceiling something nothing anything everything thing morning evening
    wedding railing awning sibling pudding icing lightning ring string swing king wing spring
    sting sling during ceiling bathing parking
    """
)
# Particles that may follow a verb before its preposition: "jumps up into the air".
PARTICLES = word_set("up down out off around away back together along over about")
PREPOSITIONS = word_set(
    """
    through on in into across at over with near by along under onto to from behind past
    toward towards off outside inside beside among between for against after above below
    beneath alongside atop underneath around down up within upon like"""
)
MULTIWORD_PREPOSITIONS = (
    ("in", "front", "of"),
    ("next", "to"),
    ("on", "top", "of"),
    ("out", "of"),
    ("off", "of"),
    ("in", "the", "middle", "of"),
    ("on", "the", "side", "of"),
    ("close", "to"),
    ("up", "to"),
    ("away", "from"),
    ("on", "the", "edge", "of"),
    ("in", "between"),
)
ATTRIBUTE_CLASS_OF = {
    word: name for name, groups in ATTRIBUTE_CLASSES.items() for group in groups for word in group
}
ADJECTIVES = frozenset(ATTRIBUTE_CLASS_OF) | PLAIN_ADJECTIVES
COLOURS = frozenset(w for g in ATTRIBUTE_CLASSES["colour"] for w in g) | {"dark", "light"}
FUNCTION_WORDS = (
    DETERMINERS
    | NUMBER_WORDS
    | POSSESSIVES
    | AUXILIARIES
    | ADVERBS
    | PARTICLES
    | PREPOSITIONS
    | word_set(
        """
        and or but while as of that who which it he she they them him there here is are be
        being been to not no very into than then so its itself their while where what with
        has have having other others"""
    )
)


# Content-looking words that name no concept: the nouns of place phrases ("in front of", "next
# to", "at the top of", "in the background"), filler nouns and verbs. Kept out of the concept
# vocabulary (training.cedar.naming), not out of the caption parse.
STOP_WORDS = word_set(
    """
    front next top side middle edge bottom end area background something someone thing things
    high way doing does lot part piece"""
)


def is_ing_verb(word: str) -> bool:
    """Whether a word is an -ing verb form: it ends in -ing, is no -ing noun (ING_NOUNS) nor
    "being", and its stem has at least two letters, one of them a vowel."""
    if word.endswith("ing") and word not in ING_NOUNS and word != "being":
        stem = word[:-3]
        if len(stem) >= 2 and any(c in "aeiouy" for c in stem):
            return True
    return False


def word_class(word: str) -> tuple[str, str] | None:
    """(lemma, class) of a caption word for a concept vocabulary, None for a function word.

    Classes: "noun" (plurals of known nouns singularised), "adjective", "verb" (-ing and
    present-tense forms, kept as written). A content word the lexicon does not know is most
    often a noun in captions ("grass", "beach"), and is classed "noun".
    """
    low = word.lower().strip(".,;:!?\"'()")
    if not low.isalpha() or len(low) < 3 or low in FUNCTION_WORDS:
        return None
    if low in SINGULAR:
        return SINGULAR[low], "noun"
    if low in ADJECTIVES:
        return low, "adjective"
    if is_ing_verb(low) or low in VERBS_3SG or low in VERBS_BARE:
        return low, "verb"
    return low, "noun"


def article(det: str, following: str) -> str:
    """ "a" or "an" as the following word needs; any other determiner unchanged."""
    if det not in ("a", "an"):
        return det
    vowel_sound = following[:1] in tuple("aeiou") and not following.startswith(
        ("uni", "use", "eu", "one")
    )
    return "an" if vowel_sound or following.startswith(("hour", "honest")) else "a"
