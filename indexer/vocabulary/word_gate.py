"""The gate on a version's learnt word concepts: a learnt word keeps a row in its postings only
where the word's own text direction does not rule the row out.

A learnt word w (training.cedar.readout) is active on a row where its margin is ≥ 0, a cut set
on the training corpus's rows. On a gallery of another corpus that cut lets through rows which
the word's text direction t̃_w places in the word's bulk. So the version keeps the entry (w, i)
only where the row's hubness-corrected score along t̃_w reaches the word's gate cut:

    ⟨x̃_i, t̃_w⟩ − h_i  ≥  μ_w + GATE_Z·σ_w

μ_w and σ_w the mean and spread of that score over the gallery, read from the moments of
[x̃, h] the version keeps (indexer/vocabulary/gallery_directions.GalleryMoments; h_i the row's hub
value), GATE_Z from training.cedar.gallery_cuts (picked on the dev splits). Every reader of the
postings — both engines' filters, a hit's concepts, the catalog's counts, a Milvus export — then
sees the gated word, and nothing is decided per query.

Zero-shot words. A zero-shot word of the readout (no labels; its entries are where its text
direction's cosine reaches the training corpus's τ) is read on a gallery the way a phrase is
(service/engine/open_vocabulary.py): it keeps the entry (w, i) only where the row stands out
of the word's own bulk on this gallery (the empirical null's cut of its corrected scores, read
on the moments' kept sample: `zero_shot_cut`; the filter's first cut μ_w + z·σ_w is left out,
its z taught by learnt words that a gallery of a new subject does not trust) *and* the word
wins its neighbourhood on the row — its standardised score
reaches each of its nearest words' (training.cedar.gallery_trust: a cat reads "cat", not
"tiger"). Only the caption lexicon's words are kept so (the readout's other zero-shot words are
the training captions' rare tokens, typos among them, and keep no entry): the words a hit may
show unlearnt, marked zero-shot. A filter on a zero-shot word still cuts it anew on the gallery
(service/engine/open_vocabulary.py), whatever its entries here.

The cuts are measured by a full build on the version's own moments and kept beside them
(vocabulary_gates.npy, float32 [V]: NaN where a word is not gated, +inf where it keeps no
entry).
`strata index add` gates its new rows at the base's kept cuts and `strata index delete` keeps
them, so every row of a lineage is gated alike (re-measuring would gate the base's rows twice);
the next full build measures them again. A version whose base kept no cuts (written before the
gate, or with no open-vocabulary state) stays ungated.

`gate_cuts` is pure; `gated_entries` reads the rows block by block; `write_gated` rewrites the
postings of a version being written without the entries that fail.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexer.format.postings import CHUNK_BITS, Postings
from indexer.format.postings_writer import filter_postings
from indexer.vocabulary.gallery_directions import GalleryMoments, corrected_direction
from training.cedar.caption_words import lexicon_terms
from training.cedar.gallery_cuts import GATE_Z, raised_cuts
from training.cedar.gallery_trust import standard_scores, wins
from training.cedar.readout.vocabulary import VocabularyReadout

GATES = "vocabulary_gates.npy"
NULL_ROWS = 4096  # kept sample rows a zero-shot word's null is read on, at most
GATE_WORK = "gate-work"  # where the gated postings are written before they replace the others


@dataclass(frozen=True)
class GatePlan:
    """How a version being written gates its learnt words: `cuts` None measures them on its own
    moments (a full build), else the base's kept cuts (an add or a delete); only the rows from
    `from_row` on are gated (the base's rows were, at the same cuts)."""

    cuts: np.ndarray | None = None
    from_row: int = 0


MEASURED = GatePlan()  # a full build's: the cuts measured on its moments, every row gated


@dataclass(frozen=True)
class Contest:
    """What a zero-shot word's entries are also held to (module doc): each word's neighbours
    [V, m] (training.cedar.readout.artifact.word_neighbours) and the gallery's mean `mu` and
    spread `sigma` [V] of every word's corrected score (training.cedar.gallery_trust)."""

    neighbours: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray
    contested: np.ndarray  # bool [V]: the words held to it (the zero-shot ones)

    def wins(
        self, word: int, features: np.ndarray, hubs: np.ndarray, text: np.ndarray
    ) -> np.ndarray:
        """bool [n]: where `word` wins its neighbourhood on rows x̃ `features` [n, D] with hub
        values `hubs` [n] (`text` the readout's directions)."""
        words = np.concatenate([[word], self.neighbours[word]]).astype(np.int64)
        z = standard_scores(features, hubs, text[words], self.mu[words], self.sigma[words])
        return wins(z[:, 0], z[:, 1:])


def gate_cuts(
    moments: GalleryMoments, readout: VocabularyReadout, zero_shot: bool = False
) -> np.ndarray:
    """float32 [V]: each learnt word's gate cut μ_w + GATE_Z·σ_w of its hubness-corrected score
    over the gallery whose `moments` are given; with `zero_shot`, each zero-shot word of the
    caption lexicon its zero-shot cut (`zero_shot_cut`) and every other zero-shot word +inf
    (module doc); NaN where a word is not gated (a zero-shot word, without `zero_shot`)."""
    if readout.text is None:
        raise ValueError("the gate needs the readout's text directions")
    cuts = np.full(len(readout.words), np.nan, dtype=np.float32)
    lexicon = set(lexicon_terms().words)
    shown: list[int] = []
    for w, word in enumerate(readout.words):
        if not readout.is_zero_shot(w):
            cuts[w] = moments.cut(corrected_direction(readout.text[w]), GATE_Z)
        elif zero_shot:
            if word in lexicon:
                shown.append(w)
            else:
                cuts[w] = np.inf
    if shown:
        cuts[shown] = zero_shot_cut(moments, readout.text[shown])
    return cuts


def zero_shot_cut(moments: GalleryMoments, text: np.ndarray) -> np.ndarray:
    """float32 [W]: the zero-shot cut of words (unit directions `text` [W, D]) on the gallery
    of `moments`: each one's empirical null's cut of its corrected scores
    (training.cedar.gallery_cuts.null_cut; +inf where no row stands out), read on up to
    NULL_ROWS of the moments' kept sample (the share of rows past a score, not their number,
    decides it). Picked over the filter's cut on the dev pairs by
    benchmarks/training/gallery_trust.py (its `cut=null`)."""
    directions = np.hstack([np.asarray(text, np.float64), -np.ones((len(text), 1))])
    sample = moments.sizing[
        np.unique(np.linspace(0, len(moments.sizing) - 1, NULL_ROWS).astype(np.int64))
    ]
    scores = sample @ directions.T.astype(np.float32)
    return raised_cuts(scores, np.full(len(directions), -np.inf)).astype(np.float32)


def gated_entries(
    postings: Postings,
    first_word: int,
    blocks: Iterable[tuple[int, np.ndarray, np.ndarray]],
    text: np.ndarray,
    cuts: np.ndarray,
    from_row: int = 0,
    contest: Contest | None = None,
) -> np.ndarray:
    """bool [E]: which postings entries stay — all but the word entries of rows ≥ `from_row`
    that fail their word's gate. `blocks`: (first row, x̃ [n, D], h [n]) of every row in row
    order; word w's concept is `first_word` + w; `text` [V, D] the words' t̃, `cuts` [V] their
    gate cuts (`gate_cuts`); a word `contest` holds is also kept only where it wins its
    neighbourhood (module doc). Each word's entries of a block are found through the chunk
    table, so no word's rows are decoded past the block."""
    if postings.chunks is None:
        raise ValueError("the gate reads postings in the compact format (a chunk table)")
    keep = np.ones(postings.entries, dtype=bool)
    for w in np.flatnonzero(np.isposinf(cuts)):  # a word that keeps no entry: none scored
        begin, end = int(postings.indptr[first_word + w]), int(postings.indptr[first_word + w + 1])
        a = int(np.searchsorted(postings.rows[begin:end], from_row)) if from_row else 0
        keep[begin + a : end] = False
    words = np.flatnonzero(~np.isnan(cuts) & ~np.isposinf(cuts))
    directions = np.asarray(text, dtype=np.float32)
    chunks = postings.chunks
    lows = np.asarray(postings.stored_rows)  # a plain view: no memmap wrapping per slice
    for start, features, hubs in blocks:
        stop = start + len(features)
        first = max(start, from_row)
        if first >= stop:
            continue
        low, high = first >> CHUNK_BITS, ((stop - 1) >> CHUNK_BITS) + 1
        begins = chunks[first_word + words, low]
        ends = chunks[first_word + words, high]
        present = np.flatnonzero(ends > begins)
        # every present word's score on every row of the block, in one product
        scores = features @ directions[words[present]].T
        for column, at in enumerate(present):
            w, begin, end = int(words[at]), int(begins[at]), int(ends[at])
            if high == low + 1:  # the block within one chunk: its low bits are the rows'
                rows = lows[begin:end].astype(np.int64) + (low << CHUNK_BITS)
            else:
                rows = postings.rows[begin:end]
            a, b = np.searchsorted(rows, (first, stop))
            if a == b:
                continue
            local = rows[a:b] - start
            corrected = scores[local, column] - hubs[local]
            passed = corrected >= cuts[w]  # words with a cut only
            if contest is not None and contest.contested[w] and passed.any():
                held = np.flatnonzero(passed)
                passed[held] = contest.wins(w, features[local[held]], hubs[local[held]], directions)
            keep[begin + a : begin + b] = passed
    return keep


def write_gated(staging: Path, postings: Postings, keep: np.ndarray, rows: int) -> list[Path]:
    """Rewrite the postings of the version being written in `staging` with only the entries
    `keep` marks (rows unchanged): written whole under GATE_WORK, then each file moved over the
    one it replaces. The paths written."""
    work = staging / GATE_WORK
    work.mkdir()
    written = filter_postings(postings, np.arange(rows, dtype=np.int64), work, keep)
    moved = [path.replace(staging / path.name) for path in written]
    work.rmdir()
    return moved
