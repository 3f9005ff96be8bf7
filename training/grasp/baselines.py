"""GraSP-VL's rotation baselines, each an artifact scored by the same eval.

- identity: plain truncation of the unrotated space;
- pca: the principal axes of the training anchors and captions (uncentred, so it stays a
  rotation about the origin and full-length cosine is kept), largest variance first;
- random: a uniformly random rotation (seeded);
- pca-gallery: the principal axes of the gallery being indexed (uncentred, as pca);
- pca-gallery-centred: the same with the gallery's mean direction moved last (the start R₀ of
  a gallery-fitted GraSP-VL, so also what its training buys over its start).

The MRL-style linear adapter and the free MLP adapter are not rotations: see adapters.py.
"""

from __future__ import annotations

import numpy as np

from training.core.artifacts import TransformArtifact, data_fingerprint
from training.core.errors import InputError
from training.core.granularity import Contract, Granularity
from training.core.rotations import centred_principal_axes, pca_rotation, random_rotation
from training.grasp.data import GraspSet

BASELINES = ("identity", "pca", "random")
GALLERY_BASELINES = ("pca-gallery", "pca-gallery-centred")


def baseline_artifact(
    name: str,
    train: GraspSet,
    contract: Contract,
    encoder: str | None = None,
    seed: int = 0,
    gallery: np.ndarray | None = None,
) -> TransformArtifact:
    dim = train.anchors.shape[1]
    if name in GALLERY_BASELINES and gallery is None:
        raise InputError(f"baseline {name} needs a gallery (--gallery)")
    if name == "pca-gallery":
        rotation = pca_rotation(gallery)
    elif name == "pca-gallery-centred":
        rotation = centred_principal_axes(gallery)
    elif name == "identity":
        rotation = np.eye(dim)
    elif name == "pca":
        rotation = pca_rotation(np.concatenate([train.anchors, train.views[Granularity.CAPTION]]))
    elif name == "random":
        rotation = random_rotation(dim, seed)
    else:
        known = ", ".join((*BASELINES, *GALLERY_BASELINES))
        raise InputError(f"unknown baseline {name!r}; choose from {known}")
    return TransformArtifact(
        method=f"baseline:{name}",
        rotation=rotation,
        mean=np.zeros(dim),
        contract=contract,
        encoder=encoder,
        data_fingerprint=(
            data_fingerprint(train.anchors)
            if name == "pca"
            else data_fingerprint(gallery)
            if gallery is not None and name in GALLERY_BASELINES
            else ""
        ),
    )
