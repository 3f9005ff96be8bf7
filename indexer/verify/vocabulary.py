"""Verifying the open vocabulary's gallery state a version keeps
(indexer/vocabulary/stored_state.py), for indexer/verify/check.py.

Its files are checksummed with every other file (verify.check_files); here, once they are
intact: the manifest's `open_vocabulary` record lists them all and a finite z; the hub values
are [rows] float32 and finite; the moments of [x̃, h] are [D + 1] and [D + 1, D + 1], finite,
the second moment symmetric; the kept sample [n, D + 1] with n ≤ rows; a sketch, where the
record names one, holds every row at the sketch's width; and the gate's cuts, where the record
names a gate, are float32, one per readout word, finite or NaN (a word not gated).
"""

from __future__ import annotations

import math
from pathlib import Path

import faiss
import numpy as np

from indexer.format.manifest import BundleManifest
from indexer.verify.faults import Fault
from indexer.vocabulary.gallery_directions import sketch_width
from indexer.vocabulary.stored_state import HUBS, MEAN, SECOND, SIZING, SKETCH, STATE_FILES
from indexer.vocabulary.word_gate import GATES


def check_vocabulary(
    path: Path, manifest: BundleManifest, intact: set[str], faults: list[str]
) -> None:
    """Faults of the version's kept state (module doc); nothing for a version without one."""
    record = manifest.open_vocabulary
    if record is None:
        return
    gate = record.get("gate")
    names = [
        *STATE_FILES,
        *([SKETCH] if record.get("sketch") else []),
        *([GATES] if gate else []),
    ]
    unlisted = [name for name in names if name not in manifest.files]
    if unlisted:
        faults.append(Fault("manifest", f"open_vocabulary: {', '.join(unlisted)} not listed"))
        return
    z = record.get("z")
    if not isinstance(z, int | float) or not math.isfinite(z):
        faults.append(Fault("manifest", f"open_vocabulary: z {z!r} is not a finite number"))
    if not all(name in intact for name in names):
        return  # check_files named the damaged file
    width = manifest.dim + 1
    expected = {
        HUBS: ((manifest.rows,), np.float32),
        MEAN: ((width,), np.float64),
        SECOND: ((width, width), np.float64),
    }
    arrays = {name: np.load(path / name, mmap_mode="r") for name in STATE_FILES}
    for name, (shape, dtype) in expected.items():
        found = arrays[name]
        if found.shape != shape or found.dtype != dtype:
            faults.append(
                Fault(
                    "rows",
                    f"{name}: {found.dtype} {found.shape}, expected {dtype.__name__} {shape}",
                )
            )
        elif not np.isfinite(found).all():
            faults.append(Fault("vectors", f"{name}: holds values that are not finite"))
    second = arrays[SECOND]
    if second.shape == (width, width) and not np.allclose(second, second.T, atol=1e-9):
        faults.append(Fault("vectors", f"{SECOND}: not symmetric"))
    sizing = arrays[SIZING]
    if sizing.ndim != 2 or sizing.shape[1] != width or len(sizing) > manifest.rows:
        faults.append(
            Fault("rows", f"{SIZING}: {sizing.shape}, expected at most {manifest.rows} × {width}")
        )
    if record.get("sketch"):
        sketch = faiss.read_index(str(path / SKETCH))
        if sketch.ntotal != manifest.rows or sketch.d != sketch_width(width):
            faults.append(
                Fault(
                    "index",
                    f"{SKETCH}: {sketch.ntotal} rows of {sketch.d} dims, expected "
                    f"{manifest.rows} of {sketch_width(width)}",
                )
            )
    if gate:
        check_gate(path, manifest, faults)


def check_gate(path: Path, manifest: BundleManifest, faults: list[str]) -> None:
    """The gate's cuts: float32 [V] (V the postings' concepts past the 2D signed axes), no
    −∞ (NaN: a word not gated; +∞: a word that keeps no entry)."""
    cuts = np.load(path / GATES, mmap_mode="r")
    words = int(manifest.postings["concepts"]) - 2 * manifest.dim
    if cuts.shape != (words,) or cuts.dtype != np.float32:
        faults.append(
            Fault("rows", f"{GATES}: {cuts.dtype} {cuts.shape}, expected float32 ({words},)")
        )
    elif np.isneginf(cuts).any():
        faults.append(Fault("vectors", f"{GATES}: holds a cut of −∞"))
