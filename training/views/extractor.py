"""Rule-based granularity views of real (Flickr8k-style) captions, and typed hard negatives.

A caption is read left to right against closed word lists kept in this module (derived by reading
the Flickr8k captions; nothing is read at run time):

    [there is|are] SUBJECT [post-modifiers] [and SUBJECT2] [is|are] VERB [particle] [prep] OBJECT

    SUBJECT      [determiner | number | "a group of" ...] adjective* noun+   (head = last noun)
    post-mods    "in/with/wearing/dressed in" + clothing or appearance  -> attribute of the subject
                 any other "prep + noun phrase" ("with a ball in its mouth") -> skipped
    VERB         an -ing form, or a known present-tense form (3rd person "runs" after a singular
                 subject, bare "run" after a plural one)
    OBJECT       the first noun phrase right after the verb, or after one preposition (and
                 particle) following it; "the edge of the water" -> "water"

Views (lower-case):

    object     determiner + subject head noun                  "a dog"
    attribute  the subject noun phrase with its attribute(s)   "a black dog", "a man in a red shirt"
               (None when the subject has no attribute word)
    relation   subject + verb (+ preposition + object head)    "a dog running through the grass"
               (None when no verb follows the subject)

Anything that fits no rule gives None rather than a guess: the subject head must be a known
noun, every word between the determiner and the head must be a known adjective or noun, and a
word after the subject that is not a known verb form ends the parse without a relation.

`make_negatives` edits the same parse into hard negatives of seven kinds (NEGATIVE_KINDS; see its
docstring), each a fluent sentence or None; their hand-judged precision is in
NEGATIVES_PRECISION.md.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from training.core.errors import InputError

# --- word lists -----------------------------------------------------------------------------


def _words(text: str) -> frozenset[str]:
    """The whitespace-separated words of a word-list literal."""
    return frozenset(text.split())


DETERMINERS = _words(
    """
    a an the one two three four five six seven eight nine ten several some many few
    this that these those his her its their another both each"""
)  # fmt: skip
NUMBER_WORDS = _words("one two three four five six seven eight nine ten several")
POSSESSIVES = _words("his her its their")

# "a group of people" -> head "people": the quantity phrase is dropped from the views.
QUANTITY_NOUNS = _words(
    """
    group crowd couple pair team bunch herd pack line lot number family flock row
    gang troop band"""
)  # fmt: skip

PERSON_SPECIFIC = {
    # gender/age group -> nouns; object negatives move a noun to another group
    "adult male": ("man", "guy", "gentleman", "male", "father", "dad", "groom", "husband"),
    "adult female": ("woman", "lady", "female", "mother", "mom", "bride", "wife"),
    "young male": ("boy", "son"),
    "young female": ("girl", "daughter"),
}
PERSON_ROLES = (
    "player", "skier", "surfer", "snowboarder", "skateboarder", "biker", "cyclist", "bicyclist",
    "rider", "climber", "hiker", "swimmer", "runner", "dancer", "athlete", "musician",
    "guitarist", "singer", "drummer", "performer", "clown", "wrestler", "boxer", "referee",
    "goalie", "racer", "driver", "motorcyclist", "skater", "fisherman", "tourist", "jockey",
    "cowboy", "policeman", "officer", "soldier", "worker", "student", "photographer", "kayaker",
    "pitcher", "batter", "gymnast", "jogger", "fireman", "rollerblader", "wakeboarder",
    "windsurfer", "waterskier", "backpacker", "spectator", "onlooker", "fan", "vendor", "artist",
    "coach", "parasailer", "bicycler", "catcher", "cheerleader", "skydiver", "diver", "golfer",
)  # fmt: skip
PERSON_GENERIC = (
    "person", "child", "kid", "baby", "toddler", "adult", "teenager", "teen", "youth",
    "individual", "infant", "youngster", "friend", "family", "crowd", "couple", "team",
    "audience", "member", "someone",
)  # fmt: skip
ANIMAL_GROUPS = {
    # animal -> nouns; object negatives move a noun to another group
    "dog": (
        "dog", "puppy", "greyhound", "poodle", "terrier", "retriever", "collie", "shepherd",
        "lab", "labrador", "dachshund", "chihuahua", "beagle", "husky", "pitbull", "bulldog",
        "dalmatian", "dalmation", "spaniel", "sheepdog", "pug", "doberman", "rottweiler",
        "boxer", "mutt", "hound", "schnauzer", "corgi",
    ),
    "cat": ("cat", "kitten"),
    "horse": ("horse", "pony"),
    "bird": ("bird", "pigeon", "seagull", "gull", "eagle", "crane", "swan"),
    "duck": ("duck", "goose"),
    "cow": ("cow", "bull", "calf", "ox"),
    "sheep": ("sheep", "lamb"),
    "goat": ("goat",),
    "camel": ("camel",),
    "elephant": ("elephant",),
    "deer": ("deer",),
    "bear": ("bear",),
    "monkey": ("monkey",),
    "fish": ("fish",),
    "donkey": ("donkey", "mule"),
    "chicken": ("chicken", "rooster"),
    "squirrel": ("squirrel",),
    "dolphin": ("dolphin",),
    "seal": ("seal",),
    "lion": ("lion",),
    "tiger": ("tiger",),
    "llama": ("llama",),
}  # fmt: skip
ANIMAL_GENERIC = ("animal", "pet")
VEHICLES = (
    "car", "truck", "bus", "train", "boat", "motorcycle", "bike", "bicycle", "jeep", "plane",
    "airplane", "helicopter", "kayak", "canoe", "raft", "tractor", "van", "taxi", "scooter",
    "atv", "motorbike", "sailboat", "ship", "cart", "wagon", "sled",
)  # fmt: skip
# Nouns that are never the subject but are objects, places and compound modifiers.
THINGS = (
    "ball", "frisbee", "stick", "toy", "rope", "kite", "skateboard", "surfboard", "snowboard",
    "ski", "skis", "bat", "racket", "net", "goal", "hoop", "camera", "guitar", "drum",
    "microphone", "umbrella", "bag", "backpack", "bottle", "cup", "drink", "food", "book",
    "newspaper", "phone", "cellphone", "sign", "flag", "picture", "photo", "tire", "bench",
    "chair", "table", "couch", "bed", "fence", "wall", "door", "window", "gate", "ladder",
    "railing", "rail", "ramp", "pole", "post", "log", "branch", "tree", "bush", "flower",
    "plant", "leaf", "leaves", "rock", "stone", "boulder", "hill", "mountain", "cliff",
    "ledge", "slope", "trail", "path", "road", "street", "sidewalk", "track", "racetrack",
    "field", "yard", "backyard", "lawn", "park", "playground", "garden", "forest", "woods",
    "beach", "shore", "shoreline", "ocean", "sea", "lake", "river", "stream", "creek", "pond",
    "pool", "puddle", "fountain", "waterfall", "wave", "surf", "water", "snow", "sand", "grass",
    "dirt", "mud", "ice", "air", "sky", "sun", "building", "house", "room", "kitchen", "store",
    "shop", "restaurant", "bar", "stage", "court", "gym", "rink", "arena", "stadium",
    "sprinkler", "hose", "trampoline", "swing", "slide", "tunnel", "bridge", "dock", "pier",
    "tent", "box", "bucket", "basket", "blanket", "towel", "toy", "doll", "balloon", "bubble",
    "hurdle", "obstacle", "jump", "trick", "stunt", "game", "race", "match", "soccer",
    "football", "baseball", "basketball", "tennis", "hockey", "rugby", "volleyball",
    "softball", "cricket", "golf", "lacrosse", "motocross", "bmx", "city", "crowd", "area",
    "ground", "floor", "carpet", "steps", "stairs", "staircase", "corner", "sunset", "fire",
    "wood", "leash", "collar", "harness", "muzzle", "tongue", "mouth", "head", "hand", "arm",
    "leg", "foot", "face", "nose", "ear", "tail", "back", "shoulder", "hair", "paw", "body",
    "instrument", "paint", "wheel", "seat", "structure", "statue", "sculpture", "graffiti",
    "mountainside", "hillside", "desert", "jungle", "field", "meadow", "farm", "valley",
    "canyon", "dune", "cave", "subway", "station", "platform", "market", "parade", "party",
    "event", "wedding", "carnival", "fair", "festival", "concert", "stick", "cigarette",
    "sandwich", "pizza", "cake", "ice cream", "beer", "coffee", "computer", "laptop",
    "machine", "hole", "pile", "wire", "chain", "string", "pipe", "barrel", "cone", "bowl",
    "plate", "apple", "bone", "pumpkin", "christmas", "snowball", "kayak", "paddle",
    "oar", "sail", "parachute", "flip", "handstand", "wheelie", "cartwheel", "rodeo", "lap",
    "crosswalk", "intersection", "alley", "alleyway", "hallway", "doorway", "porch",
    "balcony", "roof", "ceiling", "counter", "kitchen", "background", "distance", "camera",
    "spotlight", "light", "shade", "shadow", "mirror", "puck", "stick", "swimming", "toy",
)  # fmt: skip
APPEARANCE = (
    # clothing and looks: "in/with/wearing" + one of these is an attribute of the subject
    "shirt", "t-shirt", "tshirt", "hat", "cap", "jacket", "coat", "dress", "pants", "shorts",
    "jeans", "helmet", "uniform", "suit", "outfit", "costume", "sweater", "sweatshirt",
    "hoodie", "top", "bikini", "swimsuit", "trunks", "vest", "jersey", "skirt", "scarf",
    "glasses", "sunglasses", "goggles", "boots", "shoes", "sneakers", "socks", "gloves",
    "hair", "beard", "mustache", "moustache", "mohawk", "ponytail", "collar", "harness",
    "clothes", "clothing", "gear", "wetsuit", "mask", "apron", "bandanna", "bandana",
    "headband", "hood", "overalls", "tie", "necklace", "makeup", "tattoo", "attire", "robe",
    "tutu", "leggings", "cape", "wig", "headscarf", "bathing", "bow", "earrings", "sweatpants",
    "pajamas", "tank", "polo", "blouse", "tights", "camouflage", "denim", "leather", "beanie",
    "visor",
)  # fmt: skip

# Irregular plurals; regular plurals are made by _pluralise.
IRREGULAR_PLURALS = {
    "man": "men", "woman": "women", "child": "children", "person": "people", "foot": "feet",
    "tooth": "teeth", "goose": "geese", "mouse": "mice", "sheep": "sheep", "deer": "deer",
    "fish": "fish", "leaf": "leaves", "wolf": "wolves", "calf": "calves", "ox": "oxen",
    "gentleman": "gentlemen", "fireman": "firemen", "policeman": "policemen",
    "fisherman": "fishermen", "shelf": "shelves", "knife": "knives", "scarf": "scarves",
    "skis": "skis", "glasses": "glasses", "sunglasses": "sunglasses", "shorts": "shorts",
    "pants": "pants", "jeans": "jeans", "trunks": "trunks", "goggles": "goggles",
    "clothes": "clothes", "steps": "steps", "stairs": "stairs", "woods": "woods",
    "leaves": "leaves", "overalls": "overalls", "boots": "boots", "shoes": "shoes",
    "sneakers": "sneakers", "socks": "socks", "gloves": "gloves", "leggings": "leggings",
    "tights": "tights", "sweatpants": "sweatpants", "pajamas": "pajamas", "earrings": "earrings",
}  # fmt: skip
MASS_NOUNS = _words(
    """
    water snow sand grass dirt mud ice air sky soccer football baseball basketball tennis
    hockey rugby volleyball softball cricket golf lacrosse motocross bmx surf wood paint food
    hair gear clothing makeup camouflage denim leather graffiti fire swimming christmas beer
    coffee people"""
)  # fmt: skip

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
PLAIN_ADJECTIVES = _words(
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
VERBS_3SG = _words(
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
)  # fmt: skip
VERBS_BARE = _words(
    """
    play run stand sit walk ride jump look pose wrestle fight race hold climb chase watch
    wait have take dance smile hang gather wear make enjoy do try participate talk swing pull
    laugh huddle carry splash lean drink swim lay kick go wade tug slide leap hug work read
    raise put hike eat throw stop stare share perform move lie fly fall examine embrace drive
    bite attempt tackle sunbathe sniff skate show shovel rest relax prepare peek pass meet
    lounge follow celebrate bounce battle bathe compete cross push paddle dig sing kiss march
    stroll ski surf sled hop skip roll catch crouch kneel point grab pet"""
)  # fmt: skip
# -ing words that are nouns; any other "-ing" word with a vowel before the suffix is a verb form.
ING_NOUNS = _words(
    """
    building clothing ceiling something nothing anything everything thing morning evening
    wedding railing awning sibling pudding icing lightning ring string swing king wing spring
    sting sling during ceiling bathing parking
    """
)
# Particles that may follow a verb before its preposition: "jumps up into the air".
PARTICLES = _words("up down out off around away back together along over about")
PREPOSITIONS = _words(
    """
    through on in into across at over with near by along under onto to from behind past
    toward towards off outside inside beside among between for against after above below
    beneath alongside atop underneath around down up within upon like"""
)  # fmt: skip
MULTIWORD_PREPOSITIONS = (
    ("in", "front", "of"), ("next", "to"), ("on", "top", "of"), ("out", "of"), ("off", "of"),
    ("in", "the", "middle", "of"), ("on", "the", "side", "of"), ("close", "to"),
    ("up", "to"), ("away", "from"), ("on", "the", "edge", "of"), ("in", "between"),
)  # fmt: skip
# "the edge of the water": the object is the noun after "of".
PART_NOUNS = _words(
    "edge side top middle bottom end front back corner body piece part base surface"
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


# Negatives of the three added kinds (see make_negatives).
YOUNG_PERSONS = _words(
    """
    boy girl child kid baby toddler infant youngster son daughter teenager teen youth"""
)  # fmt: skip
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
HAIR_COLOURS = _words("blond blonde brunette redheaded")
# Things a colour or size naturally describes ("a red ball"; not places or substances).
PROPS = _words(
    """
    ball frisbee stick toy rope kite skateboard surfboard snowboard bat racket umbrella bag
    backpack bottle cup book sign flag tire bench chair table fence ladder bucket box blanket
    towel balloon doll tent slide swing ramp bike bicycle car truck boat kayak canoe raft
    sled wagon cart log rock pole building house door wall camera microphone phone guitar"""
)  # fmt: skip
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
LIGHT_VERBS = _words(
    """
    take takes taking put puts putting pick picks picking get gets getting make makes making
    do does doing give gives giving turn turns turning set sets setting bring brings bringing
    have has having"""
)  # fmt: skip
IRREGULAR_BARE_FORMS = {"has": "have", "does": "do", "goes": "go"}


# Verbs a 'relation' negative may put in place of the caption's, by the verb's frame: a direct
# object of some kind ("chases a dog", "kicks a ball", "rides a bike", "plays soccer", "does a
# trick"), a preposition of motion ("runs through the grass"), of place, or nothing ("sits on the
# grass", "runs"). Bare forms; _VERB_FORMS gives the others.
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
_VERB_FORMS = {"lie": ("lies", "lying"), "catch": ("catches", "catching")}
# Words that start an object the parser does not read ("biting each other", "chases another").
OBJECT_STARTERS = DETERMINERS | _words(
    "each another something someone it him her them one himself herself themselves"
)
MOTION_LINKS = _words(
    "through into across down up over along past toward towards onto out off away around"
)
SPORTS = _words(
    """
    soccer football baseball basketball tennis hockey rugby volleyball softball cricket golf
    lacrosse"""
)  # fmt: skip
# Nouns that name a group: never swapped into another role ("a person hugging other couples").
COLLECTIVE_NOUNS = _words("couple crowd family team audience group")
# The colours and patterns an animal's coat has ("a purple dog" is no hard negative).
ANIMAL_COLOURS = _words("black white brown tan gray grey golden blond blonde spotted striped")


def _pluralise(noun: str) -> str:
    """The plural of a singular noun: irregulars from the table, else the regular English rule."""
    if noun in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[noun]
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and len(noun) > 1 and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def _with_plurals(nouns: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Every form (singular and plural) of the nouns mapped to its singular."""
    forms: dict[str, str] = {}
    for noun in nouns:
        forms[_pluralise(noun)] = noun
        forms[noun] = noun
    return forms


_PERSON_GROUP_OF = {n: group for group, ns in PERSON_SPECIFIC.items() for n in ns}
_ANIMAL_GROUP_OF = {n: group for group, ns in ANIMAL_GROUPS.items() for n in ns}
_SINGULAR: dict[str, str] = _with_plurals(
    [*_PERSON_GROUP_OF, *PERSON_ROLES, *PERSON_GENERIC, *_ANIMAL_GROUP_OF, *ANIMAL_GENERIC,
     *VEHICLES, *THINGS, *APPEARANCE, *QUANTITY_NOUNS]
)  # fmt: skip
_SINGULAR["people"] = "person"
_PLURAL_FORMS = frozenset(w for w, s in _SINGULAR.items() if w != s) | {"people"}
NOUNS = frozenset(_SINGULAR)
SUBJECT_NOUNS = frozenset(
    w
    for w, s in _SINGULAR.items()
    if s in _PERSON_GROUP_OF
    or s in PERSON_ROLES
    or s in PERSON_GENERIC
    or s in _ANIMAL_GROUP_OF
    or s in ANIMAL_GENERIC
    or s in VEHICLES
)
APPEARANCE_NOUNS = frozenset(w for w, s in _SINGULAR.items() if s in APPEARANCE)
_ATTRIBUTE_CLASS_OF = {
    word: name for name, groups in ATTRIBUTE_CLASSES.items() for group in groups for word in group
}
ADJECTIVES = frozenset(_ATTRIBUTE_CLASS_OF) | PLAIN_ADJECTIVES
_COLOURS = frozenset(w for g in ATTRIBUTE_CLASSES["colour"] for w in g) | {"dark", "light"}


# --- public interface -----------------------------------------------------------------------


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


@dataclass
class _NounPhrase:
    """Token span of a noun phrase: determiner index (or None), head index, attribute indices."""

    start: int
    end: int
    head: int
    det: int | None = None
    quantity: bool = False
    attributes: list[int] = field(default_factory=list)
    breed: int | None = None  # "german" of "german shepherd"


@dataclass
class _Parse:
    """Token positions of every role in one caption, None where the role is absent."""

    words: list[str]
    subject: _NounPhrase | None = None
    modifier_spans: list[tuple[int, int]] = field(default_factory=list)
    conjunct: _NounPhrase | None = None
    verb: int | None = None
    link: list[int] = field(default_factory=list)  # particle / preposition indices
    object: _NounPhrase | None = None
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


def extract_views(caption: str) -> CaptionViews:
    """The object, attribute and relation views of a caption (see the module docstring).

    Fields are None where the caption has no such role or fits no rule.
    """
    text = normalise_caption(caption)
    return _views_of(_parse(text), text)


FUNCTION_WORDS = (
    DETERMINERS
    | NUMBER_WORDS
    | POSSESSIVES
    | AUXILIARIES
    | ADVERBS
    | PARTICLES
    | PREPOSITIONS
    | _words(
        """
        and or but while as of that who which it he she they them him there here is are be
        being been to not no very into than then so its itself their while where what with
        has have having other others"""
    )
)  # fmt: skip


def word_class(word: str) -> tuple[str, str] | None:
    """(lemma, class) of a caption word for a concept vocabulary, None for a function word.

    Classes: "noun" (plurals of known nouns singularised), "adjective", "verb" (-ing and
    present-tense forms, kept as written). A content word the lexicon does not know is most
    often a noun in captions ("grass", "beach"), and is classed "noun".
    """
    low = word.lower().strip(".,;:!?\"'()")
    if not low.isalpha() or len(low) < 3 or low in FUNCTION_WORDS:
        return None
    if low in _SINGULAR:
        return _SINGULAR[low], "noun"
    if low in ADJECTIVES:
        return low, "adjective"
    if _is_verb([low], 0, after_auxiliary=False, plural=False) or low in VERBS_BARE:
        return low, "verb"
    return low, "noun"


NEGATIVE_KINDS = (
    "object", "attribute", "relation", "order", "swap_attribute", "add_object", "add_attribute",
)  # fmt: skip


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
    parse = _parse(views.caption)
    if _views_of(parse, views.caption) != views:
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


def _replace_object(parse: _Parse, rng: random.Random) -> str | None:
    """The 'object' negative (see make_negatives)."""
    subject, obj, low = parse.subject, parse.object, _lower(parse)
    if subject is None:
        return None
    noun = low[subject.head]
    pool = tuple(
        candidate
        for candidate in _object_pool(noun, low[obj.head] if obj else None)
        if all(_fits(low[i], candidate) for i in subject.attributes)
        and not (parse.modifier_spans and _kind_of_noun(candidate) == "animal")
    )  # no "an old girl", no "bears in summer clothes"
    replacement = _pick(pool, rng)
    if replacement is None:
        return None
    edits = {subject.head: (_in_number_of(replacement, noun),)}
    if subject.breed is not None:
        edits[subject.breed] = ()
    edits.update(_pronouns_after(parse, _gender(noun), _gender(replacement)))
    return _rewrite(parse.words, edits)


def _gender(word: str) -> str | None:
    """ "male" or "female" for a gendered person noun or sex adjective, else None."""
    group = _PERSON_GROUP_OF.get(_SINGULAR.get(word, word), word)
    return next((sex for sex in ("female", "male") if group.endswith(sex)), None)


def _pronouns_after(
    parse: _Parse, before: str | None, after: str | None
) -> dict[int, tuple[str, ...]]:
    """Edits that put the pronouns after a singular subject in its new gender ("a man ... his
    glasses" -> "a woman ... her glasses"); none when the gender does not change."""
    if parse.subject is None or before is None or after is None or before == after:
        return {}
    if _is_plural_subject(parse):
        return {}
    low = _lower(parse)
    change = PRONOUNS_OF[after]
    return {k: (change[w],) for k in range(parse.subject.end, len(low)) if (w := low[k]) in change}


def _subject_attributes(parse: _Parse) -> list[int]:
    """Indices of the subject's attribute words, pre-nominal then in its post-modifiers."""
    return parse.subject.attributes + _modifier_attributes(parse) if parse.subject else []


def _replace_attribute(parse: _Parse, rng: random.Random) -> str | None:
    """The 'attribute' negative (see make_negatives): one of the subject's attribute words, and in
    its place, from another synonym group of its class, the group's first word that fits the noun
    it describes and is not in the caption already."""
    low = _lower(parse)
    present = set(low)
    options = [
        (index, choice)
        for index in _subject_attributes(parse)
        if _swappable(low[index])
        for group in ATTRIBUTE_CLASSES[_ATTRIBUTE_CLASS_OF[low[index]]]
        if low[index] not in group
        and (choice := next((w for w in group if _fits(w, _attribute_noun(parse, index))), None))
        and choice not in present
    ]
    if not options:
        return None
    index, choice = options[rng.randrange(len(options))]
    gender_change = _pronouns_after(parse, _gender(low[index]), _gender(choice))
    return _rewrite(parse.words, {index: (choice,), **gender_change})


def _replace_relation(parse: _Parse, rng: random.Random) -> str | None:
    """The 'relation' negative (see make_negatives): a verb of another synonym group that fits
    the verb's frame (RELATION_FRAMES), so that "a dog runs on the grass" may become "a dog sits
    on the grass" but not "a dog kicks on the grass", nor "a man throws a motorbike"."""
    if parse.verb is None or _lower(parse)[parse.verb] in LIGHT_VERBS:
        return None
    verb = _lower(parse)[parse.verb]
    frame = {form for bare in RELATION_FRAMES[_relation_frame(parse)] for form in _forms_of(bare)}
    groups = _verb_groups(verb)
    pool = tuple(w for g in groups if verb not in g for w in g if w in frame)
    choice = _pick(pool, rng)
    return None if choice is None else _rewrite(parse.words, {parse.verb: (choice,)})


def _relation_frame(parse: _Parse) -> str:
    """The RELATION_FRAMES key of the caption's verb."""
    low = _lower(parse)
    obj = parse.object
    if obj is not None and not parse.link:
        noun = low[obj.head]
        if _SINGULAR[noun] in SPORTS:
            return "thing"
        kind = _kind_of_noun(noun)
        if kind in ("person", "young person"):
            return "person"
        if kind == "thing":
            return "prop" if _SINGULAR[noun] in PROPS else "thing"
        return kind
    if any(low[k] in MOTION_LINKS for k in parse.link):
        return "motion"
    after = _at(low, parse.verb + 1) if parse.verb is not None else ""
    if not parse.link and after in OBJECT_STARTERS:
        return "person"  # an object the parser does not read: "biting each other"
    return "place"


def _forms_of(bare: str) -> tuple[str, str, str]:
    """A verb's bare, 3rd-person and -ing forms: "chase" -> ("chase", "chases", "chasing")."""
    if bare in _VERB_FORMS:
        return (bare, *_VERB_FORMS[bare])
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


def _swap_objects(parse: _Parse) -> str | None:
    """The 'order' negative (see make_negatives)."""
    subject, obj, low = parse.subject, parse.object, _lower(parse)
    if subject is None or obj is None:
        return None
    s_word, o_word = low[subject.head], low[obj.head]
    s_noun, o_noun = _SINGULAR[s_word], _SINGULAR[o_word]
    alive = ("person", "young person", "animal")
    if (
        s_noun == o_noun
        or _kind_of_noun(s_word) not in alive
        or _kind_of_noun(o_word) not in alive
        or {s_noun, o_noun} & COLLECTIVE_NOUNS
        or not all(_fits(low[i], o_noun) for i in subject.attributes)
        or not all(_fits(low[i], s_noun) for i in obj.attributes)
        or (parse.modifier_spans and "animal" in (_kind_of_noun(s_word), _kind_of_noun(o_word)))
    ):  # no "an old kid", no "pigeons in uniforms"
        return None
    edits = {
        subject.head: (_in_number_of(o_noun, s_word),),
        obj.head: (_in_number_of(s_noun, o_word),),
    }
    for breed in (subject.breed, obj.breed):
        if breed is not None:
            edits[breed] = ()
    return _rewrite(parse.words, edits)


def _swap_attribute(parse: _Parse, rng: random.Random) -> str | None:
    """The 'swap_attribute' negative (see make_negatives)."""
    subject, low = parse.subject, _lower(parse)
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
        if _synonym_group(low[i]) != _synonym_group(low[j])
        and low[i] not in {low[k] for k in partner.attributes}
        and low[j] not in own_words
        and _fits(low[i], low[partner.head])
        and _fits(low[j], _attribute_noun(parse, i))
    ]
    if swaps:
        return _rewrite(parse.words, swaps[rng.randrange(len(swaps))])
    moves = [
        {i: (), _first_noun(low, partner): (low[i], parse.words[_first_noun(low, partner)])}
        for partner in partners
        if not partner.attributes and _takes_attributes(low[partner.head])
        for i in subject.attributes
        if _at(low, i - 1) not in ADJECTIVE_LINKS
        and _at(low, i + 1) not in ADJECTIVE_LINKS
        and _fits(low[i], low[partner.head])
    ]
    return _rewrite(parse.words, moves[rng.randrange(len(moves))]) if moves else None


def _attribute_noun(parse: _Parse, index: int) -> str:
    """The noun an attribute word of the subject describes: the subject head, or the clothing
    noun of the post-modifier it sits in ("red" of "a man in a red shirt" -> "shirt"; "red" of
    "a woman in red" -> "clothing")."""
    low = _lower(parse)
    for start, end in parse.modifier_spans:
        if start <= index < end:
            return next((low[k] for k in range(index, end) if low[k] in NOUNS), "clothing")
    return low[parse.subject.head] if parse.subject else ""


def _synonym_group(word: str) -> tuple[str, ...]:
    """The synonym group of an attribute word."""
    return next(g for groups in ATTRIBUTE_CLASSES.values() for g in groups if word in g)


def _kind_of_noun(word: str) -> str:
    """ "person", "young person", "animal", "vehicle" or "thing" for a noun form."""
    noun = _SINGULAR.get(word, word)
    if noun in YOUNG_PERSONS:
        return "young person"
    if noun in _PERSON_GROUP_OF or noun in PERSON_ROLES or noun in PERSON_GENERIC:
        return "person"
    if noun in _ANIMAL_GROUP_OF or noun in ANIMAL_GENERIC:
        return "animal"
    return "vehicle" if noun in VEHICLES else "thing"


def _fits(attribute: str, noun: str) -> bool:
    """Whether an attribute word can describe a noun (CLASSES_BY_KIND; colours on people only as
    hair colours, hair colours only on people)."""
    kind = _kind_of_noun(noun)
    attribute_class = _ATTRIBUTE_CLASS_OF[attribute]
    person = kind in ("person", "young person")
    if attribute_class == "colour" and (attribute in HAIR_COLOURS) != person:
        return False
    if kind == "animal" and attribute_class in ("colour", "pattern"):
        return attribute in ANIMAL_COLOURS
    if attribute_class in ("size", "length") and _SINGULAR.get(noun, noun) in MASS_NOUNS:
        return False
    return attribute_class in CLASSES_BY_KIND[kind]


def _takes_attributes(noun: str) -> bool:
    """Whether a noun is something a colour or size naturally describes: a person, an animal, a
    vehicle or a prop (not a place or a substance: no "the black grass")."""
    return _kind_of_noun(noun) != "thing" or _SINGULAR.get(noun) in PROPS


def _first_noun(low: list[str], phrase: _NounPhrase) -> int:
    """Where an adjective goes in a phrase: before its breed modifier or its first noun
    ("a football player" -> before "football")."""
    if phrase.breed is not None:
        return phrase.breed
    k = phrase.head
    while k - 1 >= phrase.start and low[k - 1] in NOUNS and k - 1 != phrase.det:
        k -= 1
    return k


def _add_object(parse: _Parse, rng: random.Random) -> str | None:
    """The 'add_object' negative (see make_negatives)."""
    subject, low = parse.subject, _lower(parse)
    if subject is None or parse.verb is None or parse.conjunct is not None:
        return None
    if "and" in low[subject.start : parse.subject_end]:  # "a man in a shirt and cap and a girl"
        return None
    mentioned = {_SINGULAR[w] for w in low if w in _SINGULAR}
    noun = _pick(tuple(n for n in _companion_pool(low[subject.head]) if n not in mentioned), rng)
    if noun is None:
        return None
    at = parse.subject_end
    edits: dict[int, tuple[str, ...]] = {}
    if parse.auxiliary is not None:
        edits[parse.auxiliary] = (
            PLURAL_AUXILIARIES.get(low[parse.auxiliary], low[parse.auxiliary]),
        )
    elif low[parse.verb] in VERBS_3SG and not _is_plural_subject(parse):
        edits[parse.verb] = (_bare_form(low[parse.verb]),)
        for k in range(parse.verb + 2, len(low)):  # "holds a microphone and speaks"
            if low[k - 1] == "and" and _is_third_person_verb(low[k]):
                edits[k] = (_bare_form(low[k]),)
    if low[:2] == ["there", "is"]:
        edits[1] = ("are",)
    following = edits.get(at, (parse.words[at],))
    edits[at] = ("and", _article("a", noun), noun, *following)
    return _rewrite(parse.words, edits)


def _is_plural_subject(parse: _Parse) -> bool:
    """Whether the subject phrase is plural ("dogs", "a group of people")."""
    subject = parse.subject
    return subject is not None and (_is_plural(_lower(parse)[subject.head]) or subject.quantity)


def _companion_pool(word: str) -> tuple[str, ...]:
    """Nouns an 'add_object' negative may conjoin to a subject: its own kind, another group."""
    noun, kind = _SINGULAR[word], _kind_of_noun(word)
    if kind in ("person", "young person"):
        group = _PERSON_GROUP_OF.get(noun)
        return tuple(p for p in PERSON_POOL if _PERSON_GROUP_OF[p] != group)
    if kind == "animal":
        group = _ANIMAL_GROUP_OF.get(noun)
        return tuple(a for a in ANIMAL_POOL if _ANIMAL_GROUP_OF[a] != group)
    return tuple(v for v in VEHICLE_POOL if v != noun)


def _is_third_person_verb(word: str) -> bool:
    """Whether a word after "and" reads as a 3rd-person present verb: a known one, or an unknown
    word in -s that is no noun ("and pretends")."""
    if word in VERBS_3SG:
        return True
    unknown = word not in NOUNS and word not in FUNCTION_WORDS and word not in ADJECTIVES
    return unknown and word.endswith("s") and not word.endswith("ss") and word.isalpha()


def _bare_form(verb: str) -> str:
    """The bare form of a 3rd-person present verb: "runs" -> "run", "catches" -> "catch"."""
    if verb in IRREGULAR_BARE_FORMS:
        return IRREGULAR_BARE_FORMS[verb]
    if verb.endswith("ies"):
        return verb[:-1] if len(verb) <= 4 else verb[:-3] + "y"
    if verb.endswith(("sses", "shes", "ches", "xes", "zzes")):
        return verb[:-2]
    return verb[:-1]


def _add_attribute(parse: _Parse, rng: random.Random) -> str | None:
    """The 'add_attribute' negative (see make_negatives)."""
    subject, low = parse.subject, _lower(parse)
    if subject is None:
        return None
    phrases = []
    if not _subject_attributes(parse):
        phrases.append(subject)
    obj = parse.object
    if obj is not None and not obj.attributes and _takes_attributes(low[obj.head]):
        phrases.append(obj)
    present = set(low)
    edits = [
        {_first_noun(low, phrase): (word, parse.words[_first_noun(low, phrase)])}
        for phrase in phrases
        for word in ADDED_ATTRIBUTES[_kind_of_noun(low[phrase.head])]
        if not present & set(_synonym_group(word))
    ]
    return _rewrite(parse.words, edits[rng.randrange(len(edits))]) if edits else None


def _lower(parse: _Parse) -> list[str]:
    """The parse's words in lower case."""
    return [w.lower() for w in parse.words]


# --- parsing --------------------------------------------------------------------------------


def _at(low: list[str], i: int) -> str:
    """The lower-case word at i, or "" past the end."""
    return low[i] if 0 <= i < len(low) else ""


def _parse_noun_phrase(low: list[str], i: int, heads: frozenset[str]) -> _NounPhrase | None:
    """A noun phrase starting at i whose head is in `heads`, or None.

    [determiner | "a group of" ...] (adjective | link word | breed modifier)* noun+ ; the head
    is the last noun of the run that is in `heads` ("a football player" -> "player").
    """
    start = i
    det: int | None = None
    quantity = False
    if _at(low, i) in ("a", "an") and _at(low, i + 1) in QUANTITY_NOUNS and _at(low, i + 2) == "of":
        i += 3
        quantity = True
        if _at(low, i) in ("the", "these", "those"):
            i += 1
    elif _at(low, i) in ("lots", "plenty") and _at(low, i + 1) == "of":
        i += 2
        quantity = True
    elif _at(low, i) in DETERMINERS:
        det = i
        i += 1
        if _at(low, i) in NUMBER_WORDS and _at(low, i - 1) in ("the", "these", "those"):
            i += 1
    attributes: list[int] = []
    breed: int | None = None
    while True:
        word = _at(low, i)
        if word in BREED_MODIFIERS and _at(low, i + 1) in BREED_MODIFIERS[word]:
            breed = i
            i += 1
        elif word in ADJECTIVES:
            if word in _ATTRIBUTE_CLASS_OF:
                attributes.append(i)
            i += 1
        elif word in ADJECTIVE_LINKS and attributes and i > start:
            nxt = _at(low, i + 1)
            if word == "and" and nxt not in ADJECTIVES:
                break
            if word == "very" and nxt not in ADJECTIVES:
                break
            i += 1
        else:
            break
    nouns: list[int] = []
    while _at(low, i) in NOUNS and len(nouns) < 3:
        nouns.append(i)
        i += 1
    while nouns and low[nouns[-1]] not in heads:
        nouns.pop()
    if not nouns:
        return None
    head = nouns[-1]
    if breed is not None and breed != head - 1:
        breed = None
    return _NounPhrase(start, head + 1, head, det, quantity, attributes, breed)


def _parse_colour_run(low: list[str], i: int) -> tuple[int, list[int]] | None:
    """ "red", "black and white": colour words with no noun after them (as in "a man in red")."""
    attributes: list[int] = []
    while _at(low, i) in _COLOURS or (_at(low, i) == "and" and attributes):
        if low[i] != "and":
            attributes.append(i)
        i += 1
    if not attributes or low[i - 1] == "and" or _at(low, i) in NOUNS:
        return None
    return i, attributes


def _match_preposition(low: list[str], i: int) -> int | None:
    """The index after a (multi-word) preposition starting at i, or None."""
    for phrase in MULTIWORD_PREPOSITIONS:
        if tuple(low[i : i + len(phrase)]) == phrase:
            return i + len(phrase)
    return i + 1 if _at(low, i) in PREPOSITIONS else None


def _parse_post_modifier(low: list[str], i: int) -> tuple[int, bool] | None:
    """A post-modifier starting at i: (end, is_attribute), or None.

    Attribute: "in|with|wearing|dressed in" + clothing/appearance noun phrase (joined by "and"),
    or "in" + colours ("in red"). Any other "preposition + noun phrase (+ of noun phrase)" is a
    non-attribute modifier that the parser steps over.
    """
    word = _at(low, i)
    j = i
    if word == "dressed":
        j = i + 1
        if _at(low, j) == "up":
            j += 1
        if _at(low, j) in ("in", "as"):
            j += 1
    elif word in ("in", "with", "wearing"):
        j = i + 1
    if j > i:
        phrase = _parse_noun_phrase(low, j, APPEARANCE_NOUNS)
        if phrase is not None:
            end = phrase.end
            while _at(low, end) == "and":
                more = _parse_noun_phrase(low, end + 1, APPEARANCE_NOUNS)
                if more is None:
                    break
                end = more.end
            if word == "with" and _at(low, end) == "on":
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
    if _at(low, end) == "of":
        inner = _parse_noun_phrase(low, end + 1, NOUNS)
        if inner is not None:
            end = inner.end
    return end, False


def _is_verb(low: list[str], i: int, after_auxiliary: bool, plural: bool) -> bool:
    """Whether the word at i is the subject's verb: an -ing form, or a present-tense form that
    agrees with the subject (only without an auxiliary)."""
    word = _at(low, i)
    if word.endswith("ing") and word not in ING_NOUNS and word != "being":
        stem = word[:-3]
        if len(stem) >= 2 and any(c in "aeiouy" for c in stem):
            return True
    if after_auxiliary:
        return False
    return word in VERBS_BARE if plural else word in VERBS_3SG


def _parse_object(low: list[str], i: int) -> tuple[list[int], _NounPhrase | None] | None:
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
                and _SINGULAR[low[phrase.head]] in PART_NOUNS
                and _at(low, phrase.end) == "of"
            ):
                inner = _parse_noun_phrase(low, phrase.end + 1, NOUNS)
                if inner is None:
                    return None
                link += list(range(phrase.start, phrase.end + 1))
                phrase = inner
            return link, phrase
        if _attempt == 0 and _at(low, i) in PARTICLES:
            link.append(i)
            i += 1
            continue
        break
    return (link, None) if link else None


def _parse(text: str) -> _Parse:
    """Role positions of a normalised caption (see the module docstring for the grammar)."""
    words = text.split()
    low = [w.lower() for w in words]
    parse = _Parse(words)
    i = 2 if low[:2] in (["there", "is"], ["there", "are"]) else 0
    subject = _parse_noun_phrase(low, i, SUBJECT_NOUNS)
    if subject is None or _at(low, subject.end) in ("'", "'s"):
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
    plural = low[subject.head] in _PLURAL_FORMS or subject.quantity
    if _at(low, i) == "and":
        conjunct = _parse_noun_phrase(low, i + 1, SUBJECT_NOUNS)
        if conjunct is None:
            return parse
        j = conjunct.end
        while (modifier := _parse_post_modifier(low, j)) is not None:
            j = modifier[0]
        parse.conjunct, i, plural = conjunct, j, True
    auxiliary = _at(low, i) in AUXILIARIES
    if auxiliary:
        parse.auxiliary = i
        i += 1
    if _at(low, i) in ADVERBS:
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


# --- views ----------------------------------------------------------------------------------


def _article(det: str, following: str) -> str:
    """ "a" or "an" as the following word needs; any other determiner unchanged."""
    if det not in ("a", "an"):
        return det
    vowel_sound = following[:1] in tuple("aeiou") and not following.startswith(
        ("uni", "use", "eu", "one")
    )
    return "an" if vowel_sound or following.startswith(("hour", "honest")) else "a"


def _head_with_determiner(low: list[str], phrase: _NounPhrase) -> str:
    """ "a dog", "two children", "people" (quantity phrases drop their "a group of")."""
    head = low[phrase.head]
    if phrase.breed is not None:
        head = f"{low[phrase.breed]} {head}"
    if phrase.det is None:
        return head
    return f"{_article(low[phrase.det], head)} {head}"


def _modifier_attributes(parse: _Parse) -> list[int]:
    """Indices of attribute words inside the subject's attribute post-modifiers."""
    low = [w.lower() for w in parse.words]
    return [
        k
        for start, end in parse.modifier_spans
        for k in range(start, end)
        if low[k] in _ATTRIBUTE_CLASS_OF
    ]


def _views_of(parse: _Parse, text: str) -> CaptionViews:
    """The CaptionViews of a parse."""
    low = [w.lower() for w in parse.words]
    subject = parse.subject
    if subject is None:
        return CaptionViews(text, None, None, None, None)
    object_view = _head_with_determiner(low, subject)
    attribute_indices = subject.attributes + _modifier_attributes(parse)
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
            body = [_article(low[subject.det], body[0]), *body]
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


# --- negatives ------------------------------------------------------------------------------


def _is_plural(word: str) -> bool:
    """Whether a known noun form is plural."""
    return word in _PLURAL_FORMS


def _in_number_of(noun: str, slot_word: str) -> str:
    """`noun` (singular) in the grammatical number of `slot_word`; mass nouns stay as they are."""
    if _is_plural(slot_word) and noun not in MASS_NOUNS:
        return _pluralise(noun)
    return noun


def _object_pool(word: str, object_word: str | None) -> tuple[str, ...]:
    """Candidates to replace the subject noun: same kind, another group (see make_negatives)."""
    noun = _SINGULAR[word]
    exclude = {_SINGULAR[object_word]} if object_word else set()
    if noun in _PERSON_GROUP_OF:
        group = _PERSON_GROUP_OF[noun]
        pool = tuple(p for p in PERSON_POOL if _PERSON_GROUP_OF[p] != group)
    elif noun in PERSON_ROLES:
        pool = tuple(p for p in ROLE_POOL if p != noun)
    elif noun in _ANIMAL_GROUP_OF:
        group = _ANIMAL_GROUP_OF[noun]
        pool = tuple(a for a in ANIMAL_POOL if _ANIMAL_GROUP_OF[a] != group)
    elif noun in VEHICLES:
        pool = tuple(v for v in VEHICLE_POOL if v != noun and not {v, noun} <= {"bike", "bicycle"})
    elif noun in YOUNG_PERSONS:
        pool = ("man", "woman")
    elif noun in PERSON_GENERIC or noun == "person":
        pool = ANIMAL_POOL
    else:
        pool = THING_POOL
    return tuple(p for p in pool if p != noun and p not in exclude)


def _swappable(word: str) -> bool:
    """Whether an attribute word has a class with another synonym group to swap to."""
    return _ATTRIBUTE_CLASS_OF.get(word.lower(), "other") != "other"


def _verb_groups(verb: str) -> tuple[tuple[str, ...], ...]:
    """The synonym groups of verbs in the same form as `verb`."""
    if verb in VERBS_BARE:
        return VERB_GROUPS_BARE
    if verb in VERBS_3SG:
        return VERB_GROUPS_3SG
    return VERB_GROUPS_ING


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
            article = _article(out[k - 1].lower(), out[k].lower())
            out[k - 1] = article.capitalize() if out[k - 1][:1].isupper() else article
    if out and words[0][:1].isupper():
        out[0] = out[0][:1].upper() + out[0][1:]
    return " ".join(out)
