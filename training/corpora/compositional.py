"""Synthetic compositional scenes with views at every granularity and typed hard negatives.

A scene is (subject attribute, subject, relation, object attribute, object, place), captioned

    "a brown dog chasing a red ball on the beach"

with its language view at each granularity of the prefix contract

    object     "a dog"
    attribute  "a brown dog"
    relation   "a dog chasing a ball"
    caption    the full caption

and one hard negative of each type, made by changing exactly one factor of the caption:

    object     the subject noun swapped            "a brown cat chasing a red ball on the beach"
    attribute  the subject attribute swapped       "a white dog chasing a red ball on the beach"
    relation   the relation swapped                "a brown dog sitting on a red ball on the beach"
    order      subject and object roles swapped    "a red ball chasing a brown dog on the beach"

A paraphrase ("on the beach, a brown dog is chasing a red ball") stands in for the scene's image
when training text-only. The ground-truth factors are kept, so later stages can score prefixes
and concepts against them. Scenes are generated in fixed blocks, each from its own seeded
generator, so scene i is the same whatever number of scenes is asked for; the split of each
scene is drawn with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from training.core.errors import InputError
from training.corpora.records import Corpus, Record

SUBJECTS = (
    "dog", "cat", "horse", "bird", "cow", "sheep", "goat", "bear",
    "rabbit", "duck", "fox", "child", "man", "woman", "boy", "girl",
)  # fmt: skip
THINGS = (
    "ball", "car", "bicycle", "chair", "table", "umbrella", "boat", "kite",
    "bench", "box", "truck", "bucket", "fence", "rock",
)  # fmt: skip
ATTRIBUTES = (
    "red", "blue", "green", "yellow", "black", "white", "brown", "orange",
    "purple", "pink", "gray", "small", "large", "old", "wet", "striped",
)  # fmt: skip
RELATIONS = (
    "chasing", "holding", "sitting on", "standing next to", "looking at", "jumping over",
    "lying under", "carrying", "walking behind", "pulling", "pushing", "kicking",
)  # fmt: skip
PLACES = (
    "on the beach", "in the park", "on the street", "in a field", "in the kitchen",
    "in the garden", "in the forest", "in the snow", "by the river", "on a farm",
    "in the living room", "in the city square",
)  # fmt: skip

NEGATIVE_TYPES = ("object", "attribute", "relation", "order")
GRANULARITY_VIEWS = ("object", "attribute", "relation", "caption")
SPLITS = ("train", "val", "test", "all")
BLOCK = 4096


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def noun_phrase(attribute: str | None, noun: str) -> str:
    words = f"{attribute} {noun}" if attribute else noun
    return f"{article(words)} {words}"


@dataclass(frozen=True)
class Scene:
    index: int
    subject_attribute: str
    subject: str
    relation: str
    object_attribute: str
    object: str
    place: str
    split: str

    def caption(self) -> str:
        return self._sentence(self.subject_attribute, self.subject, self.relation)

    def _sentence(self, attribute: str, subject: str, relation: str) -> str:
        return (
            f"{noun_phrase(attribute, subject)} {relation} "
            f"{noun_phrase(self.object_attribute, self.object)} {self.place}"
        )

    def paraphrase(self) -> str:
        """The same scene in another surface form: the text-only stand-in for its image."""
        return (
            f"{self.place}, {noun_phrase(self.subject_attribute, self.subject)} is "
            f"{self.relation} {noun_phrase(self.object_attribute, self.object)}"
        )

    def views(self) -> dict[str, str]:
        return {
            "object": noun_phrase(None, self.subject),
            "attribute": noun_phrase(self.subject_attribute, self.subject),
            "relation": f"{noun_phrase(None, self.subject)} {self.relation} "
            f"{noun_phrase(None, self.object)}",
            "caption": self.caption(),
        }

    def negatives(self, swap_subject: str, swap_attribute: str, swap_relation: str) -> dict:
        order = (
            f"{noun_phrase(self.object_attribute, self.object)} {self.relation} "
            f"{noun_phrase(self.subject_attribute, self.subject)} {self.place}"
        )
        return {
            "object": self._sentence(self.subject_attribute, swap_subject, self.relation),
            "attribute": self._sentence(swap_attribute, self.subject, self.relation),
            "relation": self._sentence(self.subject_attribute, self.subject, swap_relation),
            "order": order,
        }


def _other(rng: np.random.Generator, current: np.ndarray, size: int) -> np.ndarray:
    """Uniform indices in [0, size) that differ from `current`, element-wise."""
    draw = rng.integers(0, size - 1, current.shape[0])
    return draw + (draw >= current)


class CompositionalCorpus(Corpus):
    """`scenes` synthetic scenes from `seed`; `split` keeps train, val, test or all of them.

    Splits are drawn per scene with probabilities `fractions` (train, val, test).
    """

    kind = "compositional"

    def __init__(
        self,
        scenes: int = 20_000,
        seed: int = 0,
        split: str = "all",
        fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
    ) -> None:
        super().__init__("error")
        if scenes < 1:
            raise InputError(f"compositional corpus needs at least one scene, got {scenes}")
        if split not in SPLITS:
            raise InputError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
        if len(fractions) != 3 or min(fractions) < 0 or not np.isclose(sum(fractions), 1.0):
            raise InputError(
                f"split fractions must be three non-negative shares summing to 1, got {fractions}"
            )
        self.scenes, self.seed, self.split, self.fractions = scenes, seed, split, tuple(fractions)

    def records(self) -> Iterator[Record]:
        for block_start in range(0, self.scenes, BLOCK):
            yield from self._block(block_start // BLOCK, min(BLOCK, self.scenes - block_start))

    def _block(self, block: int, count: int) -> Iterator[Record]:
        rng = np.random.default_rng([self.seed, block])
        objects = (*SUBJECTS, *THINGS)
        subject = rng.integers(0, len(SUBJECTS), BLOCK)
        subject_attribute = rng.integers(0, len(ATTRIBUTES), BLOCK)
        relation = rng.integers(0, len(RELATIONS), BLOCK)
        obj = _other(rng, subject, len(objects))  # SUBJECTS come first in `objects`
        object_attribute = rng.integers(0, len(ATTRIBUTES), BLOCK)
        place = rng.integers(0, len(PLACES), BLOCK)
        split_draw = rng.random(BLOCK)
        swap_subject = _other(rng, subject, len(SUBJECTS))
        swap_attribute = _other(rng, subject_attribute, len(ATTRIBUTES))
        swap_relation = _other(rng, relation, len(RELATIONS))
        bounds = np.cumsum(self.fractions)[:2]
        split_index = np.searchsorted(bounds, split_draw, side="right")
        for i in range(count):
            split = SPLITS[int(split_index[i])]
            if self.split != "all" and split != self.split:
                continue
            scene = Scene(
                index=block * BLOCK + i,
                subject_attribute=ATTRIBUTES[subject_attribute[i]],
                subject=SUBJECTS[subject[i]],
                relation=RELATIONS[relation[i]],
                object_attribute=ATTRIBUTES[object_attribute[i]],
                object=objects[obj[i]],
                place=PLACES[place[i]],
                split=split,
            )
            negatives = scene.negatives(
                SUBJECTS[swap_subject[i]],
                ATTRIBUTES[swap_attribute[i]],
                RELATIONS[swap_relation[i]],
            )
            yield scene_record(scene, negatives)

    def size_hint(self) -> int:
        if self.split == "all":
            return self.scenes
        return round(self.scenes * self.fractions[SPLITS.index(self.split)])

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "scenes": self.scenes,
            "seed": self.seed,
            "split": self.split,
            "fractions": list(self.fractions),
        }


def scene_record(scene: Scene, negatives: dict[str, str]) -> Record:
    scene_id = f"scene-{scene.index:07d}"
    fields: dict[str, Any] = {"split": scene.split, "anchor_text": scene.paraphrase()}
    fields.update({f"view_{name}": text for name, text in scene.views().items()})
    fields.update({f"neg_{name}": text for name, text in negatives.items()})
    fields.update(
        subject=scene.subject,
        subject_attribute=scene.subject_attribute,
        relation=scene.relation,
        object=scene.object,
        object_attribute=scene.object_attribute,
        place=scene.place,
    )
    return Record(id=scene_id, text=scene.caption(), group=scene_id, fields=fields)
