"""The open vocabulary's gallery state kept in a bundle version: measured when the version is
written (`strata index build | add | delete`), read by the service instead of measured at its
first phrase.

What every zero-shot phrase reads on a gallery (indexer/vocabulary/gallery_state.py: the moments
of [x̃, h], z, every row's hub value h) and, past SKETCH_ROWS rows, the sketch that finds a
phrase's rows without scanning (indexer/vocabulary/gallery_directions.py) are functions of the
version's rows and its two artifacts alone, once the CEDAR artifact holds its words' text
directions (training.cedar.readout's `text`). So the version that holds the rows holds them too:

    vocabulary_hubs.npy       float32 [N]: each row's hub value h
    vocabulary_mean.npy       float64 [D + 1]: the mean of [x̃, h]
    vocabulary_second.npy     float64 [D + 1, D + 1]: the mean of [x̃, h][x̃, h]ᵀ
    vocabulary_sizing.npy     float32 [n, D + 1]: the kept sample of [x̃, h]
    vocabulary_sketch.faiss   the sketch of every row's [x̃, h] (past SKETCH_ROWS rows)

and the manifest's `open_vocabulary` record holds z, the rows the moments were measured on, the
hub words' count, the files and the seconds it took. The service then makes a phrase's first cut
in milliseconds on every worker, the hub values are memory-mapped (one copy for all workers),
and a hot swap carries the new version's state with it.

A version whose CEDAR artifact lacks the text directions (made before they were kept), whose
readout is missing or cannot cut a phrase (no teacher, no recorded z, no zero-shot word), or
whose full-length prefix keeps no exact vectors gets no state
(`open_vocabulary` null): the service measures it at the first phrase, as before.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from tqdm import tqdm

from indexer.format.bundle import Bundle
from indexer.format.manifest import BundleError
from indexer.format.mapped import check_mapped_files
from indexer.format.prefix_index import exact_storage
from indexer.vocabulary.gallery_directions import GalleryMoments, sketched
from indexer.vocabulary.gallery_state import (
    GalleryState,
    VocabularyError,
    augmented_blocks,
    measured_state,
    readout_directions,
    told,
)
from training.cedar.gallery_cuts import hub_words

log = logging.getLogger(__name__)

SAMPLE_ROWS = 1 << 16  # rows the moments, z and the sketch's codebooks are measured on, at most
SKETCH_ROWS = 1 << 17  # up to this many rows a phrase scans the gallery; past it, a sketch
HUBS = "vocabulary_hubs.npy"
MEAN = "vocabulary_mean.npy"
SECOND = "vocabulary_second.npy"
SIZING = "vocabulary_sizing.npy"
SKETCH = "vocabulary_sketch.faiss"
STATE_FILES = (HUBS, MEAN, SECOND, SIZING)


def write_state(
    staging: Path, bundle: Bundle, progress: bool = False
) -> tuple[dict[str, Any] | None, dict[Path, int | None]]:
    """Measure the open vocabulary's state of the version being written in `staging` (`bundle`:
    its files so far, opened there) and write it: the manifest's `open_vocabulary` record and
    the files written (path → rows, None for the sketch); (None, {}) where the version gets no
    state (module doc). `progress`: a bar over the passes over every row."""
    readout = bundle.coder.readout
    directions = None if readout is None else readout_directions(readout)
    if readout is None or directions is None:
        return None, {}
    storage = exact_storage(bundle.index(bundle.dim))
    if storage is None:
        return None, {}
    started = time.perf_counter()
    sketch = bundle.rows > SKETCH_ROWS
    passes = (bundle.rows if bundle.rows > SAMPLE_ROWS else 0) + (bundle.rows if sketch else 0)
    shown = progress and passes > 0
    with tqdm(total=passes, desc="open vocabulary", unit="row", disable=not shown) as bar:
        try:
            state = measured_state(bundle, storage, directions, SAMPLE_ROWS, bar.update)
        except VocabularyError as exc:  # no phrase can be cut: the service says why, per call
            log.warning("open vocabulary: no state kept: %s", exc)
            return None, {}
        sketch_index = None
        if sketch:
            rows = (
                told(block, bar.update) for block in augmented_blocks(bundle, storage, state.hubs)
            )
            sketch_index = sketched(state.moments.sizing, rows)
    moments = state.moments
    files: dict[Path, int | None] = {}
    for name, values in (
        (HUBS, np.asarray(state.hubs, dtype=np.float32)),
        (MEAN, np.asarray(moments.mean, dtype=np.float64)),
        (SECOND, np.asarray(moments.second, dtype=np.float64)),
        (SIZING, np.asarray(moments.sizing, dtype=np.float32)),
    ):
        np.save(staging / name, values, allow_pickle=False)
        files[staging / name] = len(values)
    if sketch_index is not None:
        faiss.write_index(sketch_index, str(staging / SKETCH))
        files[staging / SKETCH] = None
    seconds = time.perf_counter() - started
    log.info("open vocabulary: the state of %d rows measured in %.1f s", bundle.rows, seconds)
    record = {
        "z": state.z,
        "sample_rows": min(bundle.rows, SAMPLE_ROWS),
        "hub_words": len(hub_words(readout.words, readout.frequency)),
        "sketch": SKETCH if sketch else None,
        "seconds": round(seconds, 3),
    }
    return record, files


def stored_state(bundle: Bundle) -> GalleryState | None:
    """The state the version keeps (module doc), its files checked against the manifest and
    the hub values memory-mapped; None where it keeps none."""
    record = bundle.manifest.open_vocabulary
    if record is None:
        return None
    check_mapped_files(bundle.path, bundle.manifest.files, STATE_FILES, BundleError)
    arrays = {name: np.load(bundle.path / name, mmap_mode="r") for name in STATE_FILES}
    moments = GalleryMoments(
        np.asarray(arrays[MEAN]),
        np.asarray(arrays[SECOND]),
        np.asarray(arrays[SIZING]),
        bundle.rows,
    )
    return GalleryState(moments, float(record["z"]), arrays[HUBS])


def stored_sketch(bundle: Bundle) -> faiss.Index | None:
    """The sketch the version keeps, read into memory after its file is checked; None where it
    keeps none."""
    record = bundle.manifest.open_vocabulary
    if record is None or not record.get("sketch"):
        return None
    check_mapped_files(bundle.path, bundle.manifest.files, (SKETCH,), BundleError)
    return faiss.read_index(str(bundle.path / SKETCH))
