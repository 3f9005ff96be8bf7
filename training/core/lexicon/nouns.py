"""The nouns of the caption lexicon, by kind, with their plural forms.

Closed word lists derived by reading the Flickr8k captions (nothing is read at run time): the
person, animal and vehicle nouns a caption's subject can have, the things, places and clothing
it can mention, and every form (singular and plural) mapped to its singular. Shared by the
caption views and negatives (training.views), the CEDAR concept vocabulary and the service's
query routing. Imports nothing else of Strata.
"""

from __future__ import annotations


def word_set(text: str) -> frozenset[str]:
    """The whitespace-separated words of a word-list literal."""
    return frozenset(text.split())


# "a group of people" -> head "people": the quantity phrase is dropped from the views.
QUANTITY_NOUNS = word_set(
    """
    group crowd couple pair team bunch herd pack line lot number family flock row
    gang troop band"""
)
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
# Nouns of everyday photographs that Flickr8k's captions hardly use (a gallery of another
# source names them: a zoo's animals, a kitchen's food and things). They are concept words
# (the CEDAR readout's zero-shot words) and a phrase's slots, never a view's substitutes:
# an animal here is a caption's subject, the rest things.
OTHER_ANIMALS = (
    "giraffe", "zebra", "kangaroo", "rhino", "rhinoceros", "hippo", "hippopotamus", "panda",
    "koala", "penguin", "owl", "parrot", "peacock", "flamingo", "ostrich", "turtle", "tortoise",
    "snake", "lizard", "frog", "crocodile", "alligator", "shark", "whale", "octopus", "crab",
    "butterfly", "bee", "spider", "wolf", "fox", "rabbit", "bunny", "hamster", "mouse", "rat",
    "pig", "piglet", "buffalo", "bison", "moose", "antelope",
)  # fmt: skip
OTHER_THINGS = (
    "zoo", "broccoli", "carrot", "banana", "lemon", "grape", "strawberry", "pineapple",
    "watermelon", "tomato", "potato", "onion", "pepper", "mushroom", "lettuce", "salad",
    "cucumber", "corn", "bread", "toast", "donut", "doughnut", "bagel", "muffin", "cookie",
    "pie", "pasta", "noodle", "rice", "soup", "sushi", "burger", "hamburger", "hotdog",
    "sausage", "bacon", "egg", "cheese", "meat", "steak", "vegetable", "fruit", "dessert",
    "breakfast", "lunch", "dinner", "meal", "clock", "vase", "toilet", "sink", "bathtub",
    "shower", "refrigerator", "fridge", "oven", "microwave", "stove", "toaster", "kettle",
    "teapot", "mug", "wine", "fork", "knife", "spoon", "tray", "napkin", "jar", "television",
    "tv", "monitor", "screen", "keyboard", "tablet", "printer", "lamp", "pillow", "sofa",
    "desk", "shelf", "bookshelf", "cabinet", "drawer", "dresser", "curtain", "rug", "scissors",
    "toothbrush", "hairdryer", "suitcase", "luggage", "handbag", "purse", "wallet", "teddy",
    "airport", "runway", "harbor", "hydrant", "cloud", "tower", "church", "castle", "temple",
    "skyscraper", "office", "classroom", "library", "bathroom", "bedroom",
)  # fmt: skip
# Irregular plurals; regular plurals are made by pluralise.
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
    "scissors": "scissors", "luggage": "luggage",
}  # fmt: skip
MASS_NOUNS = word_set(
    """
    water snow sand grass dirt mud ice air sky soccer football baseball basketball tennis
    hockey rugby volleyball softball cricket golf lacrosse motocross bmx surf wood paint food
    hair gear clothing makeup camouflage denim leather graffiti fire swimming christmas beer
    coffee people"""
)
# "the edge of the water": the object is the noun after "of".
PART_NOUNS = word_set(
    "edge side top middle bottom end front back corner body piece part base surface"
)


def pluralise(noun: str) -> str:
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
        forms[pluralise(noun)] = noun
        forms[noun] = noun
    return forms


PERSON_GROUP_OF = {n: group for group, ns in PERSON_SPECIFIC.items() for n in ns}
ANIMAL_GROUP_OF = {n: group for group, ns in ANIMAL_GROUPS.items() for n in ns}
SINGULAR: dict[str, str] = _with_plurals(
    [
        *PERSON_GROUP_OF,
        *PERSON_ROLES,
        *PERSON_GENERIC,
        *ANIMAL_GROUP_OF,
        *ANIMAL_GENERIC,
        *VEHICLES,
        *THINGS,
        *APPEARANCE,
        *QUANTITY_NOUNS,
        *OTHER_ANIMALS,
        *OTHER_THINGS,
    ]
)
SINGULAR["people"] = "person"
PLURAL_FORMS = frozenset(w for w, s in SINGULAR.items() if w != s) | {"people"}
NOUNS = frozenset(SINGULAR)
SUBJECT_NOUNS = frozenset(
    w
    for w, s in SINGULAR.items()
    if s in PERSON_GROUP_OF
    or s in PERSON_ROLES
    or s in PERSON_GENERIC
    or s in ANIMAL_GROUP_OF
    or s in ANIMAL_GENERIC
    or s in OTHER_ANIMALS
    or s in VEHICLES
)
APPEARANCE_NOUNS = frozenset(w for w, s in SINGULAR.items() if s in APPEARANCE)
