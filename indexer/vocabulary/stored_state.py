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
    vocabulary_agreement.npy  each concept's agreement on the gallery,
    vocabulary_agreement_counts.npy   its counts (the shift rule's), and
    vocabulary_spread.npy     each word's spread there (indexer/vocabulary/agreement.py)

and the manifest's `open_vocabulary` record holds z, the rows the moments were measured on, the
hub words' count, the files and the seconds it took. The service then makes a phrase's first cut
in milliseconds on every worker, the hub values are memory-mapped (one copy for all workers),
and a hot swap carries the new version's state with it.

`add` and `delete` carry the base's rows' hub values (`carried_hubs`: a row's hub value is a
function of that row alone), so an add scores only its new rows against the hub words; the
moments, z and the sketch are measured again.

A version whose CEDAR artifact lacks the text directions (made before they were kept), whose
readout is missing or cannot cut a phrase (no teacher, no recorded z, no zero-shot word), or
whose full-length prefix keeps no exact vectors gets no state
(`open_vocabulary` null): the service measures it at the first phrase, as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from tqdm import tqdm

from indexer.format.bundle import Bundle
from indexer.format.manifest import BundleError
from indexer.format.mapped import check_mapped_files
from indexer.format.postings import CHUNKS, INDPTR, Postings
from indexer.format.served_index import exact_storage
from indexer.vocabulary.agreement import (
    AGREEMENT,
    COUNTS,
    SPREAD,
    measured_agreement,
    sampled,
)
from indexer.vocabulary.gallery_directions import GalleryMoments, sketched
from indexer.vocabulary.gallery_state import (
    GalleryState,
    VocabularyError,
    augmented_blocks,
    centred_blocks,
    measured_state,
    readout_directions,
    told,
)
from indexer.vocabulary.word_gate import (
    GATES,
    MEASURED,
    Contest,
    GatePlan,
    gate_cuts,
    gated_entries,
    write_gated,
)
from training.cedar.gallery_cuts import GATE_Z, hub_words
from training.cedar.gallery_trust import word_spread
from training.cedar.readout.artifact import word_neighbours
from training.cedar.readout.vocabulary import VocabularyReadout

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
    staging: Path,
    bundle: Bundle,
    progress: bool = False,
    gate: GatePlan | None = MEASURED,
    known_hubs: np.ndarray | None = None,
) -> tuple[dict[str, Any] | None, dict[Path, int | None]]:
    """Measure the open vocabulary's state of the version being written in `staging` (`bundle`:
    its files so far, opened there) and write it: the manifest's `open_vocabulary` record and
    the files written (path → rows: its entries for a postings file, None for the sketch);
    (None, {}) where the version gets no state (module doc). With a `gate`, the learnt words'
    postings are gated (indexer/vocabulary/word_gate.py) and rewritten, and the cuts kept;
    None: the base kept no cuts, nothing is gated. `known_hubs`: the first rows' hub values,
    carried from the base (`carried_hubs`), so that only the rows past them are scored.
    `progress`: a bar over the passes over every row."""
    readout = bundle.coder.readout
    directions = None if readout is None else readout_directions(readout)
    if readout is None or directions is None:
        return None, {}
    storage = exact_storage(bundle.index(bundle.dim))
    if storage is None:
        return None, {}
    started = time.perf_counter()
    sketch = bundle.rows > SKETCH_ROWS
    gated = 0 if gate is None else bundle.rows - min(gate.from_row, bundle.rows)
    carried = 0 if known_hubs is None else len(known_hubs)
    passes = (bundle.rows - carried if bundle.rows > SAMPLE_ROWS else 0) + (
        bundle.rows if sketch else 0
    )
    passes += gated
    shown = progress and passes > 0
    with tqdm(total=passes, desc="open vocabulary", unit="row", disable=not shown) as bar:
        try:
            state = measured_state(bundle, storage, directions, SAMPLE_ROWS, bar.update, known_hubs)
        except VocabularyError as exc:  # no phrase can be cut: the service says why, per call
            log.warning("open vocabulary: no state kept: %s", exc)
            return None, {}
        sketch_index = None
        if sketch:
            rows = (
                told(block, bar.update) for block in augmented_blocks(bundle, storage, state.hubs)
            )
            sketch_index = sketched(state.moments.sizing, rows)
        files: dict[Path, int | None] = {}
        gate_record = None
        measured_cuts = gate_cuts(state.moments, readout, zero_shot=True)
        cuts = measured_cuts if gate is None or gate.cuts is None else gate.cuts
        contest = word_contest(readout, state)
        agreement_started = time.perf_counter()
        agreement = measured_agreement(
            bundle, Postings(bundle.path), storage, state.hubs, cuts, contest
        )
        agreement_seconds = time.perf_counter() - agreement_started
        if gate is not None:
            files, gate_record = gated_version(
                staging, bundle, storage, state, cuts, gate, bar, contest
            )
    moments = state.moments
    for name, values in (
        (HUBS, np.asarray(state.hubs, dtype=np.float32)),
        (MEAN, np.asarray(moments.mean, dtype=np.float64)),
        (SECOND, np.asarray(moments.second, dtype=np.float64)),
        (SIZING, np.asarray(moments.sizing, dtype=np.float32)),
        (AGREEMENT, np.asarray(agreement.share, dtype=np.float32)),
        (COUNTS, np.asarray(agreement.counts, dtype=np.int32)),
        (SPREAD, np.stack([contest.mu, contest.sigma], axis=1).astype(np.float64)),
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
        "gate": gate_record,
        "agreement": {
            "file": AGREEMENT,
            "counts": COUNTS,
            "spread": SPREAD,
            "rows": len(sampled(bundle.rows)),
            "neighbours": int(contest.neighbours.shape[1]),
            "seconds": round(agreement_seconds, 3),
        },
        "seconds": round(seconds, 3),
    }
    return record, files


def word_contest(readout: VocabularyReadout, state: GalleryState) -> Contest:
    """What the version's zero-shot words are held to (indexer/vocabulary/word_gate.py): the
    readout's neighbourhoods and every word's spread on this gallery."""
    assert readout.text is not None
    mu, sigma = word_spread(state.moments.mean, state.moments.second, readout.text)
    contested = np.array([readout.is_zero_shot(w) for w in range(len(readout.words))])
    return Contest(word_neighbours(readout), mu, sigma, contested)


def gated_version(
    staging: Path,
    bundle: Bundle,
    storage: Any,
    state: GalleryState,
    cuts: np.ndarray,
    gate: GatePlan,
    bar: tqdm,
    contest: Contest | None = None,
) -> tuple[dict[Path, int | None], dict[str, Any]]:
    """Gate the learnt words' entries of the rows from `gate.from_row` on at `cuts`, rewrite
    the postings where any entry fails, and keep the cuts: the files written (path → rows or
    entries) and the record's `gate` part."""
    started = time.perf_counter()
    postings = Postings(bundle.path)  # the version being written's (staging, when it is)
    blocks = (
        (start, features, state.hubs[start : start + len(features)])
        for start, features in counted_blocks(bundle, storage, gate.from_row, bar.update)
    )
    assert bundle.coder.readout is not None and bundle.coder.readout.text is not None
    keep = gated_entries(
        postings,
        bundle.coder.axis_concepts,
        blocks,
        bundle.coder.readout.text,
        cuts,
        gate.from_row,
        contest,
    )
    removed = int(keep.size - np.count_nonzero(keep))
    files: dict[Path, int | None] = {}
    if removed:
        entries = postings.entries - removed
        counts = {INDPTR: postings.concepts + 1, CHUNKS: postings.concepts}
        for path in write_gated(staging, postings, keep, bundle.rows):
            files[path] = counts.get(path.name, entries)
    np.save(staging / GATES, np.asarray(cuts, dtype=np.float32), allow_pickle=False)
    files[staging / GATES] = len(cuts)
    record = {
        "z": GATE_Z,
        "file": GATES,
        "from_row": gate.from_row,
        "entries_removed": removed,
        "seconds": round(time.perf_counter() - started, 3),
    }
    return files, record


def counted_blocks(
    bundle: Bundle, storage: Any, from_row: int, advance: Callable[[int], object]
) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, x̃) of the blocks of rows from the one holding `from_row` on, in row order
    (those before it not read), the rows from `from_row` on told to `advance` (a progress
    bar's update)."""
    for start, features in centred_blocks(bundle, storage, from_row):
        yield start, features
        advance(max(0, start + len(features) - max(start, from_row)))


def kept_gate(bundle: Bundle) -> np.ndarray | None:
    """The gate cuts a version keeps (indexer/vocabulary/word_gate.py), checked against the
    manifest; None where it keeps none."""
    record = bundle.manifest.open_vocabulary
    if record is None or not record.get("gate"):
        return None
    check_mapped_files(bundle.path, bundle.manifest.files, (GATES,), BundleError)
    return np.load(bundle.path / GATES, allow_pickle=False)


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


def carried_hubs(base: Bundle, kept: np.ndarray | None = None) -> np.ndarray | None:
    """The hub values a new version of `base` carries for the base's rows, in order (those
    `kept`, a bool mask, for a delete): its kept state's, since a row's hub value is a function
    of that row alone; None where it keeps none."""
    state = stored_state(base)
    if state is None:
        return None
    hubs = np.asarray(state.hubs, dtype=np.float32)
    return hubs if kept is None else hubs[kept]
