"""Open vocabulary: a word or phrase the catalog lacks, filtered on as a zero-shot concept.

A filter reference by name that names no concept and is a phrase of one to three words
("giraffe", "fire hydrant", "teddy bear") becomes a zero-shot concept through the vocabulary
readout's own map (training.cedar.readout), made on its first use:

    t̃   = (t − b) / ‖t − b‖                t the phrase's text embedding (the engine's encoder),
                                              b the CEDAR mean
    s_i = ⟨x̃_i, t̃⟩                          x̃_i = (x_i − b) / ‖x_i − b‖, every gallery row
    c_i = s_i − h_i                           h_i the row's hub value (below)
    active where c_i ≥ μ_c + z · σ_c          μ_c, σ_c: the phrase's corrected scores' mean and
                                              spread on this gallery
    and c_i ≥ c_null                          the null's cut (below)

so the cut is calibrated without labels (what every phrase reads is measured once per bundle:
indexer/vocabulary/gallery_state.py). A generic row (a caption near many words' directions)
scores high for every phrase; its hub value h_i, the mean of its HUB_WORDS best scores over the
readout's words (training.cedar.gallery_cuts.hub_scores, as cross-domain similarity local
scaling corrects nearest neighbours), is taken off every phrase's score, so such a row passes
only the phrases it stands out for. μ_c and σ_c come from the gallery's moments of [x̃, h]
(indexer/vocabulary/gallery_directions.py), measured once per bundle on its rows (a seeded sample
of SAMPLE_ROWS above that many): a phrase's cut then costs D² operations, not a pass over the
gallery. z is one number per gallery, taught by the readout's learnt words on the same rows:
their filters on this gallery (the bundle's postings) are the teachers, and z is the one
standardised cut at which the filters of their *text* directions agree best with them
(training.cedar.gallery_cuts.agreeing_z; teachers: the up to 64 learnt words of highest held-out
precision that allow between 10 rows and half the gallery, `teacher_words`). So z follows the
gallery's own score distribution: on a gallery of another corpus the training corpus's z
(`zero_shot_z`) cut nothing or everything; measured on dev splits by
benchmarks/training/label_free_cuts.py. Without teachers z falls back to the artifact's
`zero_shot_z`, and without that to the median over the readout's own zero-shot words of where
τ stands in their score distribution on this gallery. A word the readout learnt never comes
here: it resolves to its learnt row (service/engine/filtering.py).

z is one number for every phrase, and the learnt words that teach it can be loose on a gallery
unlike their own corpus; a phrase rare there then keeps mostly rows it does not describe. So
each phrase's cut is also held to its own scores: their bulk, fitted as a normal null (centred
on the median, its spread the median absolute deviation's, measured on the moments' kept
sample), must account for at most NULL_FDR of the rows kept: Benjamini–Hochberg's step-up
against that null (training.cedar.gallery_cuts.null_cut, NULL_FDR), c_null the lowest score
past μ_c + z·σ_c where it holds. The null only raises a cut. Picked on the dev splits by
benchmarks/training/label_free_cuts.py, it leaves the filters where the learnt words hold
(Flickr8k in-corpus, Flickr8k → the compositional corpus) as they were, and triples the
zero-shot words' precision where they do not (the compositional corpus → Flickr8k).

Which rows pass the cut, each row's s read back from the bundle's full-length stored rows
(gallery_directions.py) and its h kept in memory (4 bytes a row):

- **scan** (a gallery of at most SCAN_ROWS rows): every row's c, exactly;
- **search** (a larger gallery, once its sketch is built): every row's [x̃, h] is held in a
  sketch (product-quantized, about D/8 bytes a row, its codebooks trained on the moments' kept
  sample: gallery_directions.py) that ranks all rows by an estimate of c in a few milliseconds.
  The sketch is asked for its best SEARCH_WIDTH rows (more when the moments' kept sample
  expects more past the cut), which are then scored exactly in the sketch's
  order, SEARCH_MIN at a time, until the last 1/SEARCH_SLACK of the rows scored holds none
  past the cut: the boundary is behind. A search can miss a row, never add one (every kept
  row passed the exact cut); its recall against the scan is measured by
  benchmarks/service/filters/filter_latency.py (1.000 on its phrases at 1M rows). A phrase the
  sample expects on more than 1/SEARCH_SHARE of the gallery, or whose search would score as
  many, is scanned.

What every phrase reads is measured once per bundle version. A version written with a CEDAR
artifact that keeps its words' text directions holds it already (indexer/vocabulary/
stored_state.py: measured by `strata index build | add | delete`): the moments, z, every row's
hub value (memory-mapped, one copy for every worker) and, past SCAN_ROWS rows, the sketch; its
first phrase costs what any phrase costs. Otherwise it runs when a phrase first needs it: at
the first phrase the readout's words embedded, the moments and z (one pass over the sampled
rows) and every row's hub value (a pass over every row, each scored against the hub words:
HUB_WORDS best of them kept), and on a gallery past SCAN_ROWS the sketch on a background thread
that the first phrase starts (a pass over every row, about D/8 bytes a row kept): phrases scan
until it is built, then search. Nothing is spent on such a gallery no phrase is asked of.

A phrase's allowed rows are kept (the last KEPT phrases): a later filter on the phrase costs one
look-up, as a catalog concept's postings do.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

import numpy as np

from indexer.format.bundle import Bundle
from indexer.format.row_bitmaps import AllowedRows
from indexer.format.served_index import exact_storage
from indexer.vocabulary.gallery_directions import (
    corrected_direction,
    direction_scores,
    product_blocks,
    recovered_norms,
    row_products,
    sketch_padded,
    sketched,
)
from indexer.vocabulary.gallery_state import (
    GalleryState,
    VocabularyError,
    augmented_blocks,
    measured_state,
    readout_directions,
)
from indexer.vocabulary.stored_state import SAMPLE_ROWS, SKETCH_ROWS, stored_sketch, stored_state
from service.engine.compute_threads import same_threads
from service.errors import QueryError
from training.cedar.caption_words import lexicon_terms
from training.cedar.gallery_cuts import empirical_null, null_cut
from training.cedar.near_misses import typo_hint
from training.core.lexicon.nouns import pluralise

log = logging.getLogger(__name__)

MAX_WORDS = 3
KEPT = 4096  # phrases whose allowed rows are kept
SCAN_ROWS = SKETCH_ROWS  # up to this many rows a phrase scans the gallery, past it it searches
SEARCH_WIDTH = 1 << 15  # candidates a phrase's search asks the sketch for, at least
SEARCH_MIN = 4096  # candidates scored exactly at a time
SEARCH_SLACK = 4  # the last 1/SEARCH_SLACK of the candidates scored holds no row: done
SEARCH_SHARE = 8  # a phrase searched past 1/SEARCH_SHARE of the gallery is scanned instead
_WORD = r"[^\W\d_][\w'-]*"  # a letter, then letters, digits, hyphens or apostrophes
_PHRASE = re.compile(rf"^{_WORD}( {_WORD}){{0,{MAX_WORDS - 1}}}$")


def phrase_of(name: str) -> str | None:
    """The phrase a name stands for (lower case, single spaces), None unless it is one to
    MAX_WORDS words of letters (a label such as '+12' or an id is no phrase)."""
    text = " ".join(name.lower().split())
    return text if _PHRASE.match(text) else None


@cache
def known_words() -> frozenset[str]:
    """The words a zero-shot phrase is read as meant, never as a typo of a catalog name: the
    caption lexicon's nouns (and their plurals), adjectives and verbs."""
    words = lexicon_terms().words
    return frozenset({*words, *(pluralise(w) for w in words)})


@dataclass(frozen=True)
class ZeroShotConcept:
    """A phrase made a concept on this gallery: its cut on s, the rows it allows, how they
    were found ('scan' or 'search'), and, where it allows (almost) none and is near catalog
    names, the warning that reads it as a typo of them (training.cedar.near_misses.typo_hint:
    made once with the concept, not on every query that names it; never for a phrase of words
    of the caption lexicon, `known_words`: a real word the gallery hardly shows was meant)."""

    phrase: str
    cut: float
    rows: AllowedRows
    found: str = "scan"
    typo: str | None = None


class OpenVocabulary:
    """Zero-shot concepts of phrases on one bundle, made on first use and kept (module doc).
    `embed`: texts → unit embeddings [N, D] (the engine's encoder); past `scan_rows` rows a
    phrase's rows are searched for; the gallery's state is measured on at most `sample_rows`
    rows. Thread-safe."""

    def __init__(
        self,
        bundle: Bundle,
        embed: Callable[[list[str]], np.ndarray],
        scan_rows: int = SCAN_ROWS,
        sample_rows: int = SAMPLE_ROWS,
    ) -> None:
        self.bundle = bundle
        self.embed = embed
        self.scan_rows, self.sample_rows = int(scan_rows), int(sample_rows)
        self._kept: OrderedDict[str, ZeroShotConcept] = OrderedDict()
        self._lock = threading.Lock()
        self._state: GalleryState | None = None
        self._preparing = threading.Lock()
        self._sketch: Any = None  # gallery_directions.sketched, once built
        self._sketching: threading.Thread | None = None
        self._building = threading.Lock()

    @property
    def searches(self) -> bool:
        """Whether a phrase's rows are searched for (a gallery past `scan_rows`)."""
        return self.bundle.rows > self.scan_rows

    def concept(self, phrase: str) -> ZeroShotConcept:
        """The phrase's zero-shot concept: kept, or made now and kept."""
        with self._lock:
            found = self._kept.get(phrase)
            if found is not None:
                self._kept.move_to_end(phrase)
                return found
        made = self.make(phrase)
        with self._lock:
            self._kept[phrase] = made
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
        return made

    def kept(self, phrase: str) -> bool:
        with self._lock:
            return phrase in self._kept

    def make(self, phrase: str) -> ZeroShotConcept:
        """The phrase's first cut from the gallery's moments, its rows past it by a search of
        the sketch once it is built (the first phrase on a large gallery starts it), else by a
        scan; then the cut raised where the null asks (module doc)."""
        direction = self.directions(self.embed([phrase]))[0]
        state = self.prepare()
        corrected = corrected_direction(direction)
        first = state.moments.cut(corrected, state.z)
        null = empirical_null(state.moments.sizing @ corrected.astype(np.float32))
        found = "scan"
        rows: np.ndarray | None = None
        if self.searches:
            sketch = self.ready_sketch()
            limit = self.bundle.rows // SEARCH_SHARE
            expected = state.moments.expected(corrected, first)
            if sketch is not None and expected <= limit:
                searched = self.searched(sketch, direction, first, expected, limit)
                if searched is not None:
                    (rows, scores), found = searched, "search"
        if rows is None:
            every = self.corrected_scores(direction)
            rows = np.flatnonzero(every >= first).astype(np.int64)
            scores = every[rows]
        cut = null_cut(scores, self.bundle.rows, null)
        allowed = AllowedRows(self.bundle.rows, rows[scores >= cut])
        typo = typo_hint(
            self.bundle.coder.catalog, phrase, allowed.count, self.bundle.rows, known_words()
        )
        return ZeroShotConcept(phrase, cut, allowed, found, typo)

    def searched(
        self, sketch: Any, direction: np.ndarray, cut: float, expected: float, limit: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The rows past the cut (on the corrected score) among the sketch's best candidates for
        the direction, scored exactly in the sketch's order, SEARCH_MIN at a time, until the
        last 1/SEARCH_SLACK of those scored holds none (module doc): ascending, and their
        corrected scores. None past `limit` candidates."""
        query = sketch_padded(corrected_direction(direction)[None, :])
        wanted = min(self.bundle.rows, max(SEARCH_WIDTH, int(SEARCH_SLACK**2 * expected)))
        while wanted <= limit:
            _, found = sketch.search(query, wanted)
            candidates = found[0][found[0] >= 0]
            passing, passing_scores, deepest = [], [], -1
            for start in range(0, len(candidates), SEARCH_MIN):
                block = candidates[start : start + SEARCH_MIN]
                scores = self.corrected_scores(direction, block)
                hits = np.flatnonzero(scores >= cut)
                passing.append(block[hits])
                passing_scores.append(scores[hits])
                deepest = start + int(hits[-1]) if len(hits) else deepest
                scored = start + len(block)
                if (
                    deepest * SEARCH_SLACK < scored * (SEARCH_SLACK - 1)
                    or scored == self.bundle.rows
                ):
                    rows = np.concatenate(passing).astype(np.int64)
                    order = np.argsort(rows, kind="stable")
                    return rows[order], np.concatenate(passing_scores)[order]
            if wanted >= self.bundle.rows:  # every row was a candidate
                break
            wanted = min(self.bundle.rows, wanted * SEARCH_SLACK)
        return None

    def directions(self, embeddings: np.ndarray) -> np.ndarray:
        """t̃ of each text embedding: centred on b, unit."""
        t = np.asarray(embeddings, dtype=np.float64) - self.bundle.coder.artifact.mean
        return t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)

    def scores(self, direction: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """s_i of one t̃ [D]: every gallery row's ([N]), or the given rows' ([len(rows)]), from
        three inner products a row (module doc of gallery_directions.py)."""
        grasp, b = self.bundle.grasp, self.bundle.coder.artifact.mean
        m = np.asarray(grasp.mean, dtype=np.float64)
        rotation = np.asarray(grasp.rotation, dtype=np.float64)
        t = np.asarray(direction, dtype=np.float64)
        queries = np.stack([rotation @ t, rotation @ m, rotation @ (m - b)])
        if rows is None:
            products = np.concatenate([p for _, p in product_blocks(self.storage, queries)])
        else:
            products = row_products(self.storage, rows, queries)
        n, distance = recovered_norms(
            products[:, 1], products[:, 2], float(m @ m), float((m - b) @ (m - b))
        )
        return direction_scores(products[:, 0], float((m - b) @ t), n, distance)

    def corrected_scores(self, direction: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """s_i − h_i of one t̃ [D] (`scores` less each row's hub value): what a cut reads."""
        hubs = self.prepare().hubs
        return self.scores(direction, rows) - (hubs if rows is None else hubs[rows])

    @cached_property
    def storage(self) -> Any:  # a FAISS index, or the shared store's StoreIndex
        storage = exact_storage(self.bundle.index(self.bundle.dim))
        if storage is None:
            raise QueryError(
                "a word or phrase outside the catalog needs the bundle's full-length vectors, "
                "and this bundle's full-length prefix does not store them"
            )
        return storage

    @property
    def z(self) -> float:
        return self.prepare().z

    def prepare(self) -> GalleryState:
        """The gallery's moments, z and hub values: the version's own (module doc), else
        measured now if no phrase or earlier call did (one pass over the sampled rows, one
        over every row for the hub values)."""
        if self._state is not None:
            return self._state
        with self._preparing:  # once, however many phrases arrive together
            if self._state is None:
                self._state = stored_state(self.bundle) or self.measured()
            return self._state

    def measured(self) -> GalleryState:
        """The state measured on the bundle's rows, the words' text directions the artifact's
        own where it keeps them (as the index build measures it), else embedded now."""
        readout = self.bundle.coder.readout
        directions = None if readout is None else readout_directions(readout)
        started = time.perf_counter()
        try:
            state = measured_state(
                self.bundle,
                self.storage,
                directions or (lambda texts: self.directions(self.embed(texts))),
                self.sample_rows,
            )
        except VocabularyError as exc:
            raise QueryError(str(exc)) from None
        log.info(
            "open vocabulary: the state of %d rows measured in %.1f s (the version keeps none)",
            self.bundle.rows,
            time.perf_counter() - started,
        )
        return state

    def sketch(self) -> Any:
        """The gallery's sketch (module doc), built now if no earlier call did: a pass over
        every row; None for a gallery a phrase scans."""
        if not self.searches:
            return None
        if self._sketch is None:
            with self._building:
                if self._sketch is None:
                    self._sketch = stored_sketch(self.bundle)
                if self._sketch is None:
                    started = time.perf_counter()
                    state = self.prepare()
                    rows = augmented_blocks(self.bundle, self.storage, state.hubs)
                    self._sketch = sketched(state.moments.sizing, rows)
                    log.info(
                        "open vocabulary: the sketch of %d rows built in %.1f s",
                        self.bundle.rows,
                        time.perf_counter() - started,
                    )
        return self._sketch

    def ready_sketch(self) -> Any:
        """The sketch if it is ready to search: built, or kept by the version (read now);
        else None, and its build started in the background (`sketch_in_background`)."""
        kept = (self.bundle.manifest.open_vocabulary or {}).get("sketch")
        if self._sketch is None and kept:
            self.sketch()  # the version's own, read (never built on the caller's thread)
        if self._sketch is None:
            self.sketch_in_background()
        return self._sketch

    def sketch_in_background(self) -> threading.Thread:
        """`sketch` on a daemon thread, started once (the first phrase on a large gallery
        starts it; phrases scan until it is built); a failure is logged, and phrases go on
        scanning."""
        with self._lock:
            if self._sketching is None:
                self._sketching = threading.Thread(
                    target=self._build_sketch,
                    args=(same_threads(),),
                    name="open-vocabulary-sketch",
                    daemon=True,
                )
                self._sketching.start()
            return self._sketching

    def _build_sketch(self, threads: Callable[[], None]) -> None:
        threads()  # the starting thread's count (compute_threads.py)
        try:
            self.sketch()
        except Exception as exc:  # logged here: a phrase scans without it
            log.warning("open vocabulary: no sketch, phrases scan: %s", exc)
