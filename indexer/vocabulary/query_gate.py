"""A query's zero-shot words held to the gate its version's rows were (indexer/vocabulary/
word_gate.py): a query is no gallery row, so its words are read off its embedding; a zero-shot
word of it is kept only where the query passes the word's zero-shot cut on the gallery and the
word wins its neighbourhood on it, as a row's entry must. Its learnt words and axes are as
the coder reads them.

What it reads of the version: the gate's cuts (vocabulary_gates.npy), every word's spread on the
gallery (vocabulary_spread.npy, indexer/vocabulary/agreement.py), the readout's neighbourhoods
and the hub words' directions (the query's hub value: training.cedar.gallery_cuts.hub_scores).
A version that kept none of them leaves the words as they are.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from indexer.format.bundle import Bundle
from indexer.format.manifest import BundleError
from indexer.format.mapped import check_mapped_files
from indexer.vocabulary.agreement import SPREAD
from indexer.vocabulary.stored_state import kept_gate
from indexer.vocabulary.word_gate import Contest
from training.cedar.gallery_cuts import hub_scores, hub_words
from training.cedar.readout.artifact import word_neighbours
from training.core.metrics import unit_rows


class QueryGate:
    """The version's gate on zero-shot words, for queries (module doc)."""

    def __init__(self, bundle: Bundle, cuts: np.ndarray, spread: np.ndarray) -> None:
        readout = bundle.coder.readout
        assert readout is not None and readout.text is not None
        self.first_word = bundle.coder.axis_concepts
        self.mean = np.asarray(bundle.coder.artifact.mean, dtype=np.float32)
        self.text = np.asarray(readout.text, dtype=np.float32)
        index = {word: w for w, word in enumerate(readout.words)}
        hub = [index[w] for w in hub_words(readout.words, readout.frequency)]
        # column-major, so that hub_scores reads its transpose as it lies (no copy of the
        # [words, D] directions on every query: an Explain reads several)
        self.hub_text = np.asfortranarray(self.text[hub])
        self.cuts = np.asarray(cuts, dtype=np.float32)
        contested = np.array([readout.is_zero_shot(w) for w in range(len(readout.words))])
        self.contest = Contest(word_neighbours(readout), spread[:, 0], spread[:, 1], contested)
        self.word_of = {word.lower(): w for w, word in enumerate(readout.words)}

    @classmethod
    def of(cls, bundle: Bundle) -> QueryGate | None:
        """The version's gate, its files checked against the manifest; None where it kept no
        cuts or no spread (a version measured before them)."""
        record = (bundle.manifest.open_vocabulary or {}).get("agreement")
        cuts = kept_gate(bundle)
        if not record or cuts is None or bundle.coder.readout is None:
            return None
        check_mapped_files(bundle.path, bundle.manifest.files, (SPREAD,), BundleError)
        return cls(bundle, cuts, np.load(bundle.path / SPREAD, allow_pickle=False))

    def judge(self, embedding: np.ndarray) -> Callable[[str], bool]:
        """Whether a name holds of one vector (a unit embedding [D]) by the gallery's own text
        directions: the name is a readout word and wins its neighbourhood on the vector, as a
        zero-shot word's row entry must (a name no readout word reads: not shown to hold). The
        vector's features and hub value are read once, for every name asked of it (a
        description asks several)."""
        x = unit_rows(np.asarray(embedding, dtype=np.float32)[None, :] - self.mean)
        h = hub_scores(x, self.hub_text)

        def holds(name: str) -> bool:
            word = self.word_of.get(name.lower())
            return word is not None and bool(self.contest.wins(word, x, h, self.text)[0])

        return holds

    def kept(
        self, embeddings: np.ndarray, words: list[tuple[np.ndarray, np.ndarray]]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query (unit embeddings [n, D]): its active word concepts (ids, margins, as
        `ConceptCoder.active_words` gives them) less the zero-shot ones the gate refuses."""
        features = unit_rows(np.asarray(embeddings, dtype=np.float32) - self.mean)
        hubs = hub_scores(features, self.hub_text)
        out = []
        for x, h, (ids, margins) in zip(features, hubs, words, strict=True):
            w = np.asarray(ids, dtype=np.int64) - self.first_word
            keep = ~self.contest.contested[w]
            for at in np.flatnonzero(~keep):
                word = int(w[at])
                cut = self.cuts[word]
                if np.isnan(cut):  # not gated: the version kept this word's entries as they were
                    keep[at] = True
                elif float(x @ self.text[word]) - float(h) >= cut:
                    keep[at] = bool(self.contest.wins(word, x[None, :], h[None], self.text)[0])
            out.append((ids[keep], margins[keep]))
        return out
