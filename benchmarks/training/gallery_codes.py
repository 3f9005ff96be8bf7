"""A dev pair's gallery read as a bundle holds it, for benchmarks/training/gallery_trust.py: its
rows' x̃, hub values and word spreads, the learnt words' gate and the zero-shot words' cuts
(`read_gallery`); rows' concepts and where each name wins its neighbourhood (`codes_of`, in
standard units, or `corrected_contest` on the corrected scores); the agreement those give
(`agreements`, `agreement_counts`) and an artifact's reference (`reference_counts`, as the
artifact keeps it: training/cedar/reference_agreement.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from indexer.vocabulary.gallery_directions import gallery_moments, with_hubs
from indexer.vocabulary.gallery_state import learnt_words, taught_z
from indexer.vocabulary.word_gate import gate_cuts
from training.cedar.caption_words import lexicon_terms
from training.cedar.concepts import ConceptCoder
from training.cedar.data import load_split_rows
from training.cedar.gallery_cuts import (
    gate_passes,
    hub_scores,
    hub_words,
    raised_cuts,
    zero_shot_cuts,
)
from training.cedar.gallery_trust import agreement, standard_scores, wins, word_spread
from training.cedar.readout.vocabulary import active_on
from training.cedar.reference_agreement import reference_agreement
from training.core.artifacts import TransformArtifact
from training.core.metrics import unit_rows

BLOCK = 4096
CUT_RULES = ("filter", "null")


@dataclass
class Gallery:
    """A pair's gallery read as a bundle holds it (module doc)."""

    coder: ConceptCoder
    features: np.ndarray  # x̃ of every row
    hubs: np.ndarray
    embeddings: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray
    gate: np.ndarray
    # per rule ("filter": the filter's cut, μ + z·σ raised to the null; "null": the null's cut
    # alone), per word; +inf for a learnt word or one outside the lexicon
    zero_shot_cuts: dict[str, np.ndarray]
    zero_shot_cut: np.ndarray  # the rule's in use
    axis_word: np.ndarray  # per axis: the word of its name, −1 when none


def read_gallery(artifact: Path, cache: Path) -> tuple[Gallery, Any]:
    coder = ConceptCoder(TransformArtifact.load(artifact))
    readout = coder.readout
    assert readout is not None and readout.text is not None
    data = load_split_rows(cache)
    mean = coder.artifact.mean
    features = unit_rows(data.embeddings - mean).astype(np.float32)
    text = np.asarray(readout.text, np.float32)
    index = {w: i for i, w in enumerate(readout.words)}
    hubs = hub_scores(
        features, text[[index[w] for w in hub_words(readout.words, readout.frequency)]]
    )
    moments = gallery_moments([with_hubs(features, hubs)], len(features))
    mu, sigma = word_spread(moments.mean, moments.second, text)
    learnt = learnt_words(readout)
    sample = np.random.default_rng(0).choice(len(features), min(20_000, len(features)), False)
    active = active_on(
        readout, data.embeddings[sample], coder.artifact.rotation, mean, coder.k, learnt
    )
    z = taught_z(
        readout,
        features[sample],
        active,
        learnt,
        len(features),
        lambda words: text[[index[w] for w in words]].astype(np.float64),
        coder.artifact.extra.get("readout", {}).get("training", {}).get("zero_shot_z"),
    )
    lexicon = set(lexicon_terms().words)
    zero_shot = [
        w for w, word in enumerate(readout.words) if readout.is_zero_shot(w) and word in lexicon
    ]
    cuts = {rule: np.full(len(readout.words), np.inf) for rule in CUT_RULES}
    scores = np.concatenate(
        [
            features[s : s + BLOCK] @ text[zero_shot].T - hubs[s : s + BLOCK, None]
            for s in range(0, len(features), BLOCK)
        ]
    )
    cuts["filter"][zero_shot] = zero_shot_cuts(scores, z)
    cuts["null"][zero_shot] = raised_cuts(scores, np.full(len(zero_shot), -np.inf))
    axis_word = coder.name_words()[: coder.axis_concepts]
    gallery = Gallery(
        coder,
        features,
        hubs,
        data.embeddings,
        mu,
        sigma,
        gate_cuts(moments, readout),
        cuts,
        cuts["filter"],
        axis_word,
    )
    return gallery, data


@dataclass
class Codes:
    """Rows' concepts as a bundle holds them, and what the rule reads of each."""

    margins: np.ndarray
    learnt: np.ndarray  # bool [n, V]
    zero_shot: np.ndarray  # bool [n, V]
    z: np.ndarray  # [n, V]
    won: np.ndarray  # bool [n, V]
    axes: np.ndarray  # [n, k]


def codes_of(g: Gallery, rows: np.ndarray, near: np.ndarray) -> Codes:
    readout = g.coder.readout
    zs = np.array([readout.is_zero_shot(w) for w in range(len(readout.words))])
    text = np.asarray(readout.text, np.float32)
    z = standard_scores(g.features[rows], g.hubs[rows], text, g.mu, g.sigma)
    corrected = z * g.sigma.astype(np.float32) + g.mu.astype(np.float32)
    margins = g.coder.word_margins(g.embeddings[rows])
    learnt = (margins >= 0) & ~zs & gate_passes(corrected, g.gate)
    zero_shot = corrected >= g.zero_shot_cut
    won = np.stack([wins(z[:, w], z[:, near[w]]) for w in range(len(readout.words))], axis=1)
    axes, _ = g.coder.encode(g.embeddings[rows])
    return Codes(margins, learnt, zero_shot, z, won, axes)


def agreements(g: Gallery, codes: Codes) -> np.ndarray:
    """Each concept's agreement over the sampled rows of `codes`."""
    return agreement(*agreement_counts(g, codes))


def agreement_counts(g: Gallery, codes: Codes) -> tuple[np.ndarray, np.ndarray]:
    """(won, active) [concepts] over the sampled rows of `codes`: the rows where each concept
    is active (a word's entry, an axis among the row's k read by its name's word) and where its
    name also won."""
    a = g.coder.axis_concepts
    active = np.zeros(g.coder.concepts)
    won = np.zeros(g.coder.concepts)
    words = codes.learnt | codes.zero_shot
    active[a:] = words.sum(0)
    won[a:] = (words & codes.won).sum(0)
    for r, row_axes in enumerate(codes.axes):
        for c in row_axes:
            w = g.axis_word[c]
            if w >= 0:
                active[c] += 1
                won[c] += codes.won[r, w]
    return won, active


def corrected_contest(g: Gallery, codes: Codes, rows: np.ndarray, near: np.ndarray) -> Codes:
    """`codes` with `won` read on the rows' corrected scores ⟨x̃, t̃⟩ − h (module doc)."""
    text = np.asarray(g.coder.readout.text, np.float32)
    scores = g.features[rows] @ text.T - g.hubs[rows, None]
    won = np.stack([wins(scores[:, w], scores[:, near[w]]) for w in range(len(text))], axis=1)
    return replace(codes, won=won)


def reference_counts(artifact: Path, cache: Path) -> np.ndarray:
    """int32 [concepts, 2]: each concept's reference agreement (won, active) on the val rows of
    the cache its artifact was trained on, as the artifact keeps it
    (training/cedar/reference_agreement.py)."""
    loaded = TransformArtifact.load(artifact)
    counts = reference_agreement(loaded, load_split_rows(cache))
    assert counts is not None, f"{artifact} has no readout with text directions"
    return counts
