"""GraSP-VL's rotation baselines, each an artifact scored by the same eval.

- identity: plain truncation of the unrotated space;
- pca: the principal axes of the training anchors and captions (uncentred, so it stays a
  rotation about the origin and full-length cosine is kept), largest variance first;
- random: a uniformly random rotation (seeded).

The MRL-style linear adapter and the free MLP adapter are not rotations: see adapters.py.
"""

from __future__ import annotations

import numpy as np

from training.artifacts import TransformArtifact, data_fingerprint
from training.errors import InputError
from training.granularity import Contract, Granularity
from training.grasp.data import GraspSet
from training.rotations import pca_rotation, random_rotation

BASELINES = ("identity", "pca", "random")


def baseline_artifact(
    name: str, train: GraspSet, contract: Contract, encoder: str | None = None, seed: int = 0
) -> TransformArtifact:
    dim = train.anchors.shape[1]
    if name == "identity":
        rotation = np.eye(dim)
    elif name == "pca":
        rotation = pca_rotation(np.concatenate([train.anchors, train.views[Granularity.CAPTION]]))
    elif name == "random":
        rotation = random_rotation(dim, seed)
    else:
        raise InputError(f"unknown baseline {name!r}; choose from {', '.join(BASELINES)}")
    return TransformArtifact(
        method=f"baseline:{name}",
        rotation=rotation,
        mean=np.zeros(dim),
        contract=contract,
        encoder=encoder,
        data_fingerprint=data_fingerprint(train.anchors) if name == "pca" else "",
    )
