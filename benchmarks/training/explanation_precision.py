"""Explanation precision: of the concepts a hit shows, the share its image's other captions use.

Every test row of a captioned cache is taken as a hit; its concept list is what the service
shows (`ConceptCoder.shown`, the hit's `--shown` strongest: word concepts, then axes) under
each arm, judged as training/cedar/floor.py judges them (a name is used when at least
`--others` other captions of the row's image use it):

- before: the lists as shown before the floor (every active concept, word concepts first,
  the word concept and the axis of one name listed apart);
- merged, no floor: every concept, one entry per name, the learnt words gated as an index
  build gates them (indexer/vocabulary/word_gate.py, over every row of the cache: the gallery);
- after: the artifact's floor (picked on the val rows; `strata train floor`), one per name,
  gated (as served), and the same without the gate (`after_floor_ungated`);
- each before and after on the whole list (every active concept: what Explain's item list and
  the shared concepts show, unlimited);
- and the whole floor curve on the test rows, for the record.

The cross-corpus figures: the same script on another corpus's cache with this artifact
(`--cache`), the artifact's floor picked on its own corpus's val rows.

    python -m benchmarks.training.explanation_precision --cache runs/demo/cache-flickr8k-minilm \
        --artifact runs/demo/cedar
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from indexer.vocabulary.gallery_directions import gallery_moments, with_hubs
from indexer.vocabulary.word_gate import gate_cuts
from training.cedar.concepts import ConceptCoder
from training.cedar.data import groups_of, load_split_rows
from training.cedar.floor import (
    OTHER_CAPTIONS,
    SHOWN,
    FloorRows,
    explanation_precision,
    floor_curve,
    floor_rows,
    shown_names,
)
from training.cedar.gallery_cuts import gate_passes, hub_scores, hub_words
from training.core.artifacts import TransformArtifact
from training.core.metrics import unit_rows

EXAMPLES = 10


def listed_before(coder: ConceptCoder, rows: FloorRows, limit: int | None) -> list[list[str]]:
    """The lists as the service showed them before the floor: every active concept (padding
    left out), word concepts first, each kind by decreasing value, names as they come."""
    out = []
    for ids, values in rows.codes:
        pairs = [(int(c), float(v)) for c, v in zip(ids, values, strict=True) if c >= 0]
        pairs.sort(key=lambda cv: (cv[0] < coder.axis_concepts, -cv[1]))
        out.append([coder.catalog[c].name for c, _ in pairs[:limit]])
    return out


def gated(coder: ConceptCoder, rows: FloorRows, gallery: np.ndarray, hits: np.ndarray) -> FloorRows:
    """The hits' codes with their learnt words gated as an index build gates its postings
    (indexer/vocabulary/word_gate.py): the gallery's moments of [x̃, h] and cuts measured over
    every row of `gallery`, a word dropped from a hit where its corrected score misses its cut.
    The codes as they were where the readout keeps no text directions."""
    readout = coder.readout
    if readout is None or readout.text is None:
        return rows
    mean = coder.artifact.mean
    index = {w: i for i, w in enumerate(readout.words)}
    hub_text = readout.text[[index[w] for w in hub_words(readout.words, readout.frequency)]]
    features = unit_rows(np.asarray(gallery, dtype=np.float32) - mean).astype(np.float32)
    hubs = hub_scores(features, hub_text)
    cuts = gate_cuts(gallery_moments([with_hubs(features, hubs)], len(features)), readout)
    codes = []
    for (ids, values), row in zip(rows.codes, hits, strict=True):
        word = ids >= coder.axis_concepts
        w = ids[word] - coder.axis_concepts
        corrected = readout.text[w] @ features[row] - hubs[row]
        keep = ~word
        keep[word] = gate_passes(corrected[None, :], cuts[w])[0]
        codes.append((ids[keep], values[keep]))
    return FloorRows(codes, rows.used)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, default=Path("runs/demo/cache-flickr8k-minilm"))
    parser.add_argument("--artifact", type=Path, default=Path("runs/demo/cedar"))
    parser.add_argument("--split", default="test")
    parser.add_argument("--others", type=int, default=OTHER_CAPTIONS)
    parser.add_argument("--shown", type=int, default=SHOWN)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/explanation_precision.json"))
    args = parser.parse_args()
    artifact = TransformArtifact.load(args.artifact)
    coder = ConceptCoder(artifact)
    data = load_split_rows(args.cache)
    index = data.rows(args.split)
    texts = data.texts(index)
    ungated = floor_rows(coder, data.embeddings[index], texts, groups_of(data, index), args.others)
    rows = gated(coder, ungated, data.embeddings, index)  # as a bundle of every row serves them
    before = listed_before(coder, ungated, args.shown)
    merged = shown_names(coder.at_floor(None), rows, args.shown)
    after = shown_names(coder, rows, args.shown)
    after_ungated = shown_names(coder, ungated, args.shown)
    picked = np.linspace(0, len(index) - 1, EXAMPLES).astype(int)
    result: dict[str, Any] = {
        "cache": str(args.cache),
        "artifact": str(args.artifact),
        "split": args.split,
        "rows": len(index),
        "other_captions": args.others,
        "shown": args.shown,
        "floor": coder.floor,
        "floor_record": {k: v for k, v in artifact.extra.get("floor", {}).items() if k != "curve"},
        "concepts_at_or_above_floor": int(sum(coder.holds(c) for c in range(coder.concepts))),
        "concepts": coder.concepts,
        "before": explanation_precision(before, rows.used),
        "merged_no_floor": explanation_precision(merged, rows.used),
        "after_floor_ungated": explanation_precision(after_ungated, rows.used),
        "after": explanation_precision(after, rows.used),
        "whole_list": {  # every concept of the row, as Explain's item list shows them
            "before": explanation_precision(listed_before(coder, ungated, None), rows.used),
            "after_floor_ungated": explanation_precision(
                shown_names(coder, ungated, None), rows.used
            ),
            "after": explanation_precision(shown_names(coder, rows, None), rows.used),
        },
        "test_curve": {
            str(f): {k: round(v, 4) for k, v in figures.items()}
            for f, figures in floor_curve(coder, rows, limit=args.shown).items()
        },
        "examples": [
            {
                "caption": texts[i],
                "before": before[i],
                "after": after[i],
                "used_by_other_captions": sorted(set(before[i] + after[i]) & rows.used[i]),
            }
            for i in picked
        ],
    }
    publish(result, args.json)


if __name__ == "__main__":
    main()
