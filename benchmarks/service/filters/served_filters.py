"""Word filters as a served engine answers them, judged on the gallery's own captions.

For each of the `--words` words the gallery's captions use most (its clean caption vocabulary,
training.cedar.caption_words), `require WORD` as `SearchEngine` resolves it: a learnt word's or
an axis's postings, or a zero-shot concept of the open vocabulary for a word the catalog lacks
(service/engine/filtering.py). Its allowed rows are judged against the rows relevant to the
word (training.cedar.naming.word_relevance: at least 2 other captions of the row's image use
it; a gallery of one caption per image, that caption). Reported: macro precision, recall and F1
over the words, the words refused, and a digest of every word's allowed rows, so that two builds
of one gallery can be compared row for row.

    python -m benchmarks.service.filters.served_filters --bundles runs/x/after-fc \\
        --cache runs/comp20k-minilm --json runs/bench/served-filters-fc.json
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from service.engine.filtering import allowed_rows
from service.engine.search import SearchEngine
from service.errors import QueryError
from service.results import ConceptRef, Scope
from training.cedar.caption_words import caption_vocabulary
from training.cedar.data import groups_of, load_split_rows
from training.cedar.naming import word_relevance


def scores(allowed: np.ndarray, relevant: np.ndarray) -> tuple[float, float, float]:
    """(precision, recall, F1) of allowed rows against relevant rows (bool masks)."""
    hits = int((allowed & relevant).sum())
    precision = hits / max(int(allowed.sum()), 1)
    recall = hits / max(int(relevant.sum()), 1)
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return precision, recall, f1


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--bundles", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True, help="the gallery's cache")
    parser.add_argument("--words", type=int, default=100, help="the most used caption words")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/served_filters.json"))
    args = parser.parse_args(argv)

    engine = SearchEngine.open(args.bundles)
    rows = engine.bundle.rows
    data = load_split_rows(args.cache)
    every = np.arange(rows)
    texts, groups = data.texts(every), groups_of(data, every)
    vocabulary = caption_vocabulary(texts)
    mentions = [vocabulary.mentions(t) for t in texts]
    relevance = word_relevance(mentions, groups, len(vocabulary.words)).tocsc()
    per_word: dict[str, dict[str, Any]] = {}
    refused: dict[str, str] = {}
    for w, word in enumerate(vocabulary.words[: args.words]):
        try:
            allowed = allowed_rows(
                engine.bundle, [ConceptRef(name=word)], [], Scope.ANY, None, engine.vocabulary
            )
        except QueryError as exc:
            refused[word] = str(exc)
            continue
        mask = allowed.mask()
        relevant = np.zeros(rows, dtype=bool)
        relevant[relevance[:, w].indices] = True
        precision, recall, f1 = scores(mask, relevant)
        per_word[word] = {
            "allowed": int(mask.sum()),
            "relevant": int(relevant.sum()),
            "precision": precision,
            "recall": recall,
            "f1": f1,
            "rows_sha256": hashlib.sha256(np.flatnonzero(mask).astype(np.int64)).hexdigest(),
        }
    judged = list(per_word.values())
    result = {
        "bundles": str(args.bundles),
        "cache": str(args.cache),
        "rows": rows,
        "words": len(per_word),
        "refused": refused,
        "macro": {
            m: float(np.mean([v[m] for v in judged])) if judged else 0.0
            for m in ("precision", "recall", "f1")
        },
        "per_word": per_word,
    }
    macro = result["macro"]
    print(
        f"{len(per_word)} words ({len(refused)} refused): macro P {macro['precision']:.3f}"
        f" R {macro['recall']:.3f} F1 {macro['f1']:.3f}"
    )
    return publish(result, args.json)


if __name__ == "__main__":
    main()
