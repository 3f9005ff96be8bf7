"""Label-free cuts of word-concept filters on a gallery of another corpus: which rule transfers.

A CEDAR artifact's word filters were cut on its own corpus: a learnt word at its margin 0
(θ_w picked on the training corpus's val rows), any other word or phrase at μ + z·σ of its
own cosine scores on the gallery, z measured on the training corpus. On a gallery of another
source the words' base rates and the scores' scale move, and neither cut knows. This script
scores, on one split of a captioned gallery (the dev split, `--split val`, to pick a rule; the
test split to report it), the rules a service could apply without the gallery's labels:

learnt words (margin m_w = logit_w − θ_w on each row)
- `trained`: m_w ≥ 0 (as trained);
- `prior shift`: m_w ≥ −Δ_w, Δ_w = logit(π̂_G) − logit(π̂_S): the word's prior on the gallery
  estimated by EM on the readout's own posteriors σ(logit_w) (Saerens et al. 2002) against
  its prior on the training rows, so a word rarer on the gallery is cut higher;
- `standardised`: the cut kept in standard units of the word's logits (z_w on the training
  rows, μ + z_w·σ on the gallery);
- `null q`: m_w ≥ 0 raised to the null of the word's margins on the gallery, as a zero-shot
  cut is (below); `… where it removes ≥ share`: only for the words whose raise removes at least
  that share of their rows on the gallery;
- `less hubness`: m_w − ‖W_w‖ (h − median h) ≥ 0, the row's hub value h (below) about the
  gallery's median, in the word's own scale;
- `zero-shot (every word by its text direction)`: the served zero-shot filter for the learnt
  words too;
- `gated at μ + gσ …`: the trained filter, only on the rows where the word's text direction's
  hubness-corrected score (below) reaches μ + g·σ of its own scores on the gallery (g in GATES;
  served at g = GATE_Z, training.cedar.gallery_cuts, picked here: the best mean F1 of the three
  dev pairs);
- `zero-shot where > r× its rows` (`both where …`): where the learnt filter allows more than
  r times the rows of the word's served zero-shot filter, that filter instead (or both);

zero-shot words (cosine s = ⟨x̃, t̃⟩)
- `z trained`: μ + z·σ, z recorded at training;
- `z from learnt`: z picked on the gallery itself, as the one standardised cut whose filters of
  the learnt words' text directions best agree (macro F1) with those words' own learnt filters
  on the gallery (training.cedar.gallery_cuts.agreeing_z, its teachers `teacher_words`): the
  readout teaches the cut, no label is read;
- `z from learnt, null q`: that cut, raised where the word's own scores need it to keep the
  rows its null (a normal fitted to their bulk) accounts for to about q of those kept
  (training.cedar.gallery_cuts.zero_shot_cuts), q among FDR_GRID: the rule served before
  hubness was corrected for;
- `null q alone`: the null's cut with no first cut under it;
- `hubness-corrected …`: the same rule on s minus the row's hub value, the mean of its
  HUB_WORDS best scores over the readout's HUB_VOCABULARY words most often active in training
  (`--hub-words`; training.cedar.gallery_cuts.hub_scores, hub_words;
  cross-domain similarity local scaling, Conneau et al. 2018: a row near many words'
  directions, a generic caption, no longer passes every cut): the rule served, at q NULL_FDR,
  picked here among HUB_FDR_GRID;
- `… null q 0.1, spread below the median`: the uncorrected rule with the null's spread read as
  the root mean square of the scores below their median (`lower_half_null`), not from their
  median absolute deviation (training.cedar.gallery_cuts.empirical_null);
- `τ`: the training corpus's absolute cosine cut.

Each rule is scored with the one metric code (training.cedar.filter_quality) over the split's
judged words, learnt and zero-shot apart, beside the keyword on the row's own caption and the
cosine cut picked on the gallery's labelled val rows, and how far the gallery sits from the
training corpus (the length of its rows' mean x̃) and how far the teachers' text directions agree
with their learnt filters there (`agreement` at the taught z). Prints a table and writes JSON.

    python -m benchmarks.training.label_free_cuts --artifact runs/cedar-flickr \
        --cache runs/flickr-minilm --gallery runs/comp20k-minilm --split val
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import publish
from training.cedar.concepts import ConceptCoder
from training.cedar.data import load_split_rows
from training.cedar.filter_quality import filter_quality, pick_cosine_threshold
from training.cedar.gallery_cuts import (
    HUB_VOCABULARY,
    NULL_FDR,
    agreeing_z,
    agreement,
    hub_scores,
    hub_words,
    raised_cuts,
    zero_shot_cuts,
)
from training.cedar.gallery_quality import embed_words, judged_words
from training.cedar.readout.vocabulary import margins, readout_input, teacher_words, text_directions
from training.core.artifacts import TransformArtifact
from training.core.metrics import unit_rows

FDR_GRID = (0.05, 0.1, 0.2)  # q of the rules uncorrected for hubness
UNCORRECTED_FDR = 0.1  # their q as served before the correction (the best of FDR_GRID on dev)
HUB_FDR_GRID = (0.01, 0.02, 0.05, 0.1)  # q of the hubness-corrected rule, NULL_FDR among them
LOOSE_SHARES = (0.25, 0.5, 0.75, 0.9)  # of a learnt word's rows, removed by its null's raise
WIDE_RATIOS = (1.5, 2, 3, 5)  # a learnt filter's rows over its zero-shot filter's
GATES = (0.0, 0.5, 1.0, 1.5, 2.0)  # g of a learnt filter gated by its text direction


def null_raised(margin: np.ndarray) -> np.ndarray:
    """[W, N]: each learnt word's filter m ≥ 0, raised as a zero-shot cut is to its margins'
    null (training.cedar.gallery_cuts.raised_cuts)."""
    m = np.asarray(margin)
    return (m >= raised_cuts(m, np.zeros(m.shape[1]), UNCORRECTED_FDR)).T


def lower_half_null(scores: np.ndarray) -> tuple[float, float]:
    """The empirical null with its spread from the rows below the median alone: the root mean
    square of their distances to it (the spread compared with the served one)."""
    values = np.asarray(scores, dtype=np.float64)
    centre = float(np.median(values))
    below = centre - values[values < centre]
    return centre, float(np.sqrt(np.mean(below**2))) if len(below) else 0.0


def log_odds(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def em_prior(logits: np.ndarray, source_prior: np.ndarray, steps: int = 50) -> np.ndarray:
    """Per column: the prior on these rows that the posteriors σ(logit), moved from
    `source_prior` to it, average to (Saerens, Latinne & Decaestecker 2002)."""
    prior = source_prior.copy()
    base = log_odds(source_prior)
    for _ in range(steps):
        moved = 1 / (1 + np.exp(-(logits + (log_odds(prior) - base))))
        prior = moved.mean(axis=0)
    return prior


def scored(allowed: np.ndarray, wanted: np.ndarray, classes: list[str]) -> dict[str, float]:
    q = filter_quality(allowed, np.ones(len(allowed), dtype=bool), wanted, classes)["all"]
    return {k: round(q[k], 4) for k in ("precision", "recall", "f1")}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, required=True, help="CEDAR artifact")
    parser.add_argument("--cache", type=Path, required=True, help="its training cache")
    parser.add_argument("--gallery", type=Path, required=True, help="captioned gallery cache")
    parser.add_argument("--split", default="val", choices=("val", "test"))
    parser.add_argument(
        "--centre",
        default="training",
        choices=("training", "gallery"),
        help="b: the CEDAR training mean, or the gallery rows' own mean (label-free)",
    )
    parser.add_argument(
        "--hub-words",
        type=int,
        default=HUB_VOCABULARY,
        help="read a row's hub value over the readout's N words most often active in training "
        "(default: as served)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/bench/label-free-cuts.json"))
    args = parser.parse_args(argv)

    cedar = TransformArtifact.load(args.artifact)
    g = load_split_rows(args.gallery)
    rows = g.rows(args.split)
    if args.centre == "gallery":
        cedar.mean = g.embeddings[rows].mean(axis=0).astype(np.float32)
    coder = ConceptCoder(cedar)
    readout = coder.readout
    assert readout is not None, "the artifact has no vocabulary readout"
    k = int(cedar.extra.get("k", 32))
    source = load_split_rows(args.cache)
    vocab, relevant, words = judged_words(g, rows)
    names = [vocab.words[w] for w in words]
    classes = [vocab.classes[w] for w in words]
    wanted = relevant[:, words].T.toarray().astype(bool)
    x = g.embeddings[rows]
    index = {w: i for i, w in enumerate(readout.words)}
    learnt_cols = [index[w] for w in names if w in index and not readout.is_zero_shot(index[w])]
    learnt = np.array([w in index and not readout.is_zero_shot(index[w]) for w in names])
    training = cedar.extra["readout"].get("training", {})

    # learnt words: logits on the gallery and on the training rows
    def logits_on(rows_x: np.ndarray) -> np.ndarray:
        features = readout_input(rows_x, readout.source, cedar.rotation, cedar.mean, k)
        return margins(features, readout.weight[learnt_cols], readout.offset[learnt_cols])

    theta = readout.threshold[learnt_cols].astype(np.float64)
    g_margin = logits_on(x)  # m = logit − θ
    s_rows = source.rows("val")
    s_margin = logits_on(source.embeddings[s_rows])
    g_logit, s_logit = g_margin + theta, s_margin + theta
    source_prior = (1 / (1 + np.exp(-s_logit))).mean(axis=0)
    prior = em_prior(g_logit, source_prior)
    shift = log_odds(prior) - log_odds(source_prior)
    z_word = (theta - s_logit.mean(0)) / np.maximum(s_logit.std(0), 1e-9)
    learnt_rules = {
        "trained": (g_margin >= 0).T,
        "prior shift": (g_margin + shift >= 0).T,
        "standardised": (g_logit >= g_logit.mean(0) + z_word * g_logit.std(0)).T,
        f"null q {UNCORRECTED_FDR}": null_raised(g_margin),
    }
    # the raise only where it is evidence of a loose cut: it removes at least `share` of the
    # word's rows on the gallery
    raised, trained = learnt_rules[f"null q {UNCORRECTED_FDR}"], learnt_rules["trained"]
    removed = 1 - raised.sum(axis=1) / np.maximum(trained.sum(axis=1), 1)
    for share in LOOSE_SHARES:
        loose = removed >= share
        learnt_rules[f"null q {UNCORRECTED_FDR} where it removes ≥ {share}"] = np.where(
            loose[:, None], raised, trained
        )

    # every judged word's cosine with its text direction
    t = text_directions(embed_words(names, g.encoder), cedar.mean)
    features = unit_rows(np.asarray(x, np.float32) - cedar.mean)
    s = features @ t.T  # [N, W]
    mu, sigma = s.mean(0), s.std(0)
    z_trained = float(training.get("zero_shot_z", 0.0))
    tau = float(training.get("zero_shot_cut", 0.0))
    every_learnt = np.array([w for w in range(len(readout.words)) if not readout.is_zero_shot(w)])
    features_in = readout_input(x, readout.source, cedar.rotation, cedar.mean, k)
    all_active = (
        margins(features_in, readout.weight[every_learnt], readout.offset[every_learnt]) >= 0
    )
    counts = np.zeros(len(readout.words), dtype=np.int64)
    counts[every_learnt] = all_active.sum(axis=0)
    teachers = teacher_words(readout, counts, len(x))
    position = {w: i for i, w in enumerate(every_learnt)}
    teacher_t = text_directions(
        embed_words([readout.words[w] for w in teachers], g.encoder), cedar.mean
    )
    teacher_scores = features @ teacher_t.T
    teacher_filters = all_active[:, [position[w] for w in teachers]]
    z_learnt = agreeing_z(teacher_scores, teacher_filters)
    z_learnt = z_trained if z_learnt is None else z_learnt
    # how far the teachers' text directions agree with their learnt filters on the gallery
    taught_agreement = agreement(teacher_scores, teacher_filters, z_learnt)
    zero_rules = {
        f"z trained ({z_trained:.2f})": (s >= mu + z_trained * sigma).T,
        f"z from learnt ({z_learnt:.2f})": (s >= mu + z_learnt * sigma).T,
        f"τ ({tau:.2f})": (s >= tau).T,
    }
    alone = raised_cuts(s, np.full(s.shape[1], -np.inf), UNCORRECTED_FDR)  # no first cut
    zero_rules[f"null q {UNCORRECTED_FDR} alone"] = (s >= alone).T
    for fdr in FDR_GRID:
        cuts = zero_shot_cuts(s, z_learnt, fdr)
        zero_rules[f"z from learnt ({z_learnt:.2f}), null q {fdr}"] = (s >= cuts).T
    first = mu + z_learnt * sigma
    lower = raised_cuts(s, first, UNCORRECTED_FDR, null=lower_half_null)
    lower_name = f"z from learnt ({z_learnt:.2f}), null q {UNCORRECTED_FDR}, spread below median"
    zero_rules[lower_name] = (s >= lower).T
    # hubness: a row near many words' directions scores high for all of them; corrected as
    # CSLS does, by the mean of the row's HUB_WORDS best scores over the readout's words
    if vocabulary := hub_words(readout.words, readout.frequency, args.hub_words):
        every_word = text_directions(embed_words(vocabulary, g.encoder), cedar.mean)
        hubs = hub_scores(features, every_word)
        corrected = s - hubs[:, None]
        # the learnt words' margins corrected alike, in each word's own scale (‖W_w‖ turns a
        # cosine into logit units), about the gallery's median hub value
        scale = np.linalg.norm(readout.weight[learnt_cols], axis=1)
        shifted = g_margin - scale[None, :] * (hubs - np.median(hubs))[:, None]
        learnt_rules["less hubness"] = (shifted >= 0).T
        for fdr in HUB_FDR_GRID:
            cuts = zero_shot_cuts(corrected, z_learnt, fdr)
            served = " (served)" if fdr == NULL_FDR else ""
            name = f"hubness-corrected, z from learnt ({z_learnt:.2f}), null q {fdr}{served}"
            zero_rules[name] = (corrected >= cuts).T
        # a learnt word whose filter allows many times the rows of its own zero-shot filter
        # (the served rule) on the gallery: its text direction read instead, or both
        [served_name] = [n for n in zero_rules if n.endswith("(served)")]
        text_filter, trained = zero_rules[served_name][learnt], learnt_rules["trained"]
        learnt_rules["zero-shot (every word by its text direction)"] = text_filter
        ratio = trained.sum(axis=1) / np.maximum(text_filter.sum(axis=1), 1)
        # a learnt word's rows kept only where its text direction's corrected score is past
        # μ + g·σ of its own scores on the gallery: a loose gate that leaves the rows the text
        # direction cannot rule out and drops those it places in the word's bulk or below
        gate_mu, gate_sigma = corrected.mean(0)[learnt], corrected.std(0)[learnt]
        for g_cut in GATES:
            passes = (corrected[:, learnt] >= gate_mu + g_cut * gate_sigma).T
            learnt_rules[f"gated at μ + {g_cut}σ of its corrected text score"] = trained & passes
        for times in WIDE_RATIOS:
            wide = (ratio > times)[:, None]
            learnt_rules[f"zero-shot where > {times}× its rows"] = np.where(
                wide, text_filter, trained
            )
            learnt_rules[f"both where > {times}× its rows"] = np.where(
                wide, text_filter & trained, trained
            )
    result: dict[str, Any] = {
        "gallery": str(args.gallery),
        "split": args.split,
        # how far the gallery sits from the training corpus: the length of its rows' mean x̃
        # (x centred on the CEDAR training mean, unit), near 0 on rows like the training ones
        "mean_direction_length": round(float(np.linalg.norm(features.mean(axis=0))), 4),
        "teacher_agreement_f1": round(taught_agreement, 4),
        "words": len(names),
        "learnt": int(learnt.sum()),
        "zero_shot": int((~learnt).sum()),
        "rules": {},
    }
    wl, wz = wanted[learnt], wanted[~learnt]
    cl = [c for c, m in zip(classes, learnt, strict=True) if m]
    cz = [c for c, m in zip(classes, learnt, strict=True) if not m]
    for lname, lallowed in learnt_rules.items():
        for zname, zallowed in zero_rules.items():
            allowed = np.zeros_like(wanted)
            allowed[learnt] = lallowed
            allowed[~learnt] = zallowed[~learnt]
            result["rules"][f"{lname} | {zname}"] = {
                "all": scored(allowed, wanted, classes),
                "learnt": scored(lallowed, wl, cl) if learnt.any() else None,
                "zero_shot": scored(zallowed[~learnt], wz, cz) if (~learnt).any() else None,
            }
    mentions = [vocab.mentions(text) for text in g.texts(rows)]
    own = np.array([[w in m for m in mentions] for w in words])
    result["rules"]["keyword (own caption)"] = {"all": scored(own, wanted, classes)}
    val = g.rows("val")
    val_vocab, val_relevant, val_words = judged_words(g, val)
    val_names = [val_vocab.words[w] for w in val_words]
    val_t = text_directions(embed_words(val_names, g.encoder), cedar.mean)
    val_s = unit_rows(np.asarray(g.embeddings[val], np.float32) - cedar.mean) @ val_t.T
    cut, _ = pick_cosine_threshold(val_s.T, val_relevant[:, val_words].T.toarray().astype(bool))
    result["rules"][f"cosine ≥ {cut:.2f} (gallery's labelled val)"] = {
        "all": scored((s >= cut).T, wanted, classes)
    }
    print(f"the gallery rows' mean x̃ is {result['mean_direction_length']:.3f} long")
    print(f"the teachers' text directions agree with their filters at F1 {taught_agreement:.3f}")
    for name, r in result["rules"].items():
        parts = "  ".join(
            f"{part} {v['precision']:.3f}/{v['recall']:.3f}/{v['f1']:.3f}"
            for part, v in r.items()
            if v is not None
        )
        print(f"{name:60s} {parts}")
    return publish(result, args.out)


if __name__ == "__main__":
    main()
