"""The constructed GraSP sets the GraSP-VL tests share: scenes whose factors live in known
coordinates, so what a rotation should do is known."""

from __future__ import annotations

import numpy as np
import torch

from training.core.granularity import Granularity, default_contract
from training.core.metrics import unit_rows
from training.grasp.data import GraspSet

DIM = 32
CONTRACT = default_contract(DIM)  # 2 / 4 / 8 / 16 / 32


def constructed_set(n: int = 900, seed: int = 0) -> GraspSet:
    """Scenes whose factors live in known coordinates, object identity in the *last* ones.

    Object (8 values) in coordinates 24..31, attribute (6) in 16..23, relation (5) in 8..15,
    noise everywhere: plain truncation to D/16 = 2 coordinates sees no object at all, while a
    rotation can bring the object block to the front.
    """
    rng = np.random.default_rng(seed)

    def block(count: int, start: int) -> np.ndarray:
        vectors = np.zeros((count, DIM))
        vectors[:, start : start + 8] = rng.normal(size=(count, 8))
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    objects, attributes, relations = block(8, 24), block(6, 16), block(5, 8)
    o, a, r = rng.integers(0, 8, n), rng.integers(0, 6, n), rng.integers(0, 5, n)

    def scene(o, a, r, noise=0.0):
        return unit_rows(objects[o] + 0.8 * attributes[a] + 0.6 * relations[r] + noise)

    def other(values, size):
        return (values + rng.integers(1, size, len(values))) % size

    anchors = scene(o, a, r, 0.15 * rng.normal(size=(n, DIM)))
    views = {
        Granularity.OBJECT: unit_rows(objects[o]),
        Granularity.ATTRIBUTE: unit_rows(objects[o] + 0.8 * attributes[a]),
        Granularity.RELATION: unit_rows(objects[o] + 0.6 * relations[r]),
        Granularity.CAPTION: scene(o, a, r),
    }
    negatives = {
        "object": scene(other(o, 8), a, r),
        "attribute": scene(o, other(a, 6), r),
        "relation": scene(o, a, other(r, 5)),
    }
    split = np.where(np.arange(n) % 5 == 0, "val", np.where(np.arange(n) % 5 == 1, "test", "train"))
    return GraspSet(np.array([f"s{i}" for i in range(n)]), split, anchors, views, negatives)


def rotated(data: GraspSet, rotation: torch.Tensor) -> tuple:
    f = lambda x: torch.as_tensor(x, dtype=torch.float32) @ rotation.T  # noqa: E731
    views = {g: f(v) for g, v in data.views.items()}
    return f(data.anchors), views, {k: f(v) for k, v in data.negatives.items()}
