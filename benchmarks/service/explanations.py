"""What a user reads on a gallery: the concepts and descriptions Explain shows, judged by the
image's other captions.

For each sampled row r of a captioned gallery's `--split` rows (a bundle built from `--cache`),
Explain is asked why r matches its own caption (`SearchEngine.explain`, the code every server
runs; `near_captions` as `strata explain` asks). What it shows of the item is judged against
the other captions of r's image, never r's own:

- **explanation precision**: of the item's concepts shown (its `--shown` strongest, as a hit
  lists them), the share that at least one other caption uses (training/cedar/floor.py's
  judgement), over the rows shown any;
- **salient-word recall**: of the row's salient words — the content words at least `--salient`
  of its other captions use — the share among the concepts shown, over rows with any;
- **description precision**: over the rows whose item description has a phrase, the share of
  phrases whose every content word an other caption uses (`holds`), and the mean share of their
  words used (`word_share`); and the share of rows given a phrase;
- the query's description likewise, judged against r's own caption and the other captions.

Beside it, the label-free baseline: each row's `--shown` vocabulary words whose text embedding
(the bundle's encoder) is nearest the row's embedding by cosine, and the phrase composed from them
(training.cedar.descriptions.compose_phrase), over the CEDAR readout's words. The same metric
code scores both.

    python -m benchmarks.service.explanations --bundles runs/demo/bundles-flickr8k \\
        --cache runs/demo/cache-flickr8k-minilm --split test
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from benchmarks.training.held_out_topic import topic_groups
from service.cli.concept_views import format_explanation
from service.engine.explain import query_words
from service.engine.search import SearchEngine
from service.query.embedding import embed_texts
from service.results import Explanation, SearchQuery
from training.cedar.data import groups_of, load_split_rows
from training.cedar.descriptions import compose_phrase, content_words
from training.cedar.floor import SHOWN, used_words
from training.core.lexicon.nouns import pluralise

SALIENT = 3  # other captions that use a word for it to be salient (of an image's four others)
EXAMPLES = 20


def judged(shown: list[list[str]], used: list[frozenset[str]], salient: list[frozenset[str]]):
    """Explanation precision and salient-word recall of rows shown these names."""
    precision = [
        sum(n.lower() in u for n in names) / len(names)
        for names, u in zip(shown, used, strict=True)
        if names
    ]
    recall = [
        len({n.lower() for n in names} & s) / len(s)
        for names, s in zip(shown, salient, strict=True)
        if s
    ]
    return {
        "explanation_precision": float(np.mean(precision)) if precision else 0.0,
        "rows_shown": len(precision) / max(len(shown), 1),
        "mean_shown": float(np.mean([len(n) for n in shown])),
        "salient_recall": float(np.mean(recall)) if recall else 0.0,
        "rows_with_salient": len(recall),
    }


def described(phrases: list[str], references: list[frozenset[str]]) -> dict[str, float]:
    """Description figures of rows given these phrases ("" none), each judged against its
    row's reference words (content-word lemmas)."""
    holds, shares = [], []
    for phrase, words in zip(phrases, references, strict=True):
        mine = content_words(phrase) if phrase else set()
        if not mine:
            continue
        found = len(mine & words)
        holds.append(found == len(mine))
        shares.append(found / len(mine))
    return {
        "rows_described": len(holds) / max(len(phrases), 1),
        "description_precision": float(np.mean(holds)) if holds else 0.0,
        "word_share": float(np.mean(shares)) if shares else 0.0,
    }


def reference_words(texts: list[str], groups: list[str], own: bool) -> list[frozenset[str]]:
    """Per row: the content-word lemmas of its image's other captions (and its own with
    `own`; its own alone where its image has no other, as training.cedar.naming judges a
    corpus of one caption per image): what a description of it may say."""
    members: dict[str, list[int]] = {}
    for r, g in enumerate(groups):
        members.setdefault(g, []).append(r)
    words = [content_words(t) for t in texts]
    out = []
    for r, g in enumerate(groups):
        alone = len(members[g]) == 1
        found = set().union(*(words[o] for o in members[g] if o != r or own or alone))
        out.append(frozenset(found))
    return out


def nearest_words(
    embeddings: np.ndarray, vocabulary: list[str], word_embeddings: np.ndarray, k: int
) -> list[list[str]]:
    """Per row: the k vocabulary words whose text embedding is nearest by cosine."""
    x = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    t = word_embeddings / np.linalg.norm(word_embeddings, axis=1, keepdims=True)
    best = np.argsort(-(x @ t.T), axis=1, kind="stable")[:, :k]
    return [[vocabulary[w] for w in row] for row in best]


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--bundles", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True, help="the gallery's cache")
    parser.add_argument("--split", default="test")
    parser.add_argument("--rows", type=int, default=1000, help="rows sampled (seeded)")
    parser.add_argument("--shown", type=int, default=SHOWN)
    parser.add_argument("--salient", type=int, default=SALIENT)
    parser.add_argument("--captions", type=int, default=0, help="near captions Explain gives")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--topic",
        nargs="*",
        default=None,
        help="judge only the images whose captions use one of these words (and plurals): the "
        "held-out topic of benchmarks/training/held_out_topic.py",
    )
    parser.add_argument("--json", type=Path, default=Path("runs/bench/explanations.json"))
    args = parser.parse_args()

    engine = SearchEngine.open(args.bundles)
    data = load_split_rows(args.cache)
    index = data.rows(args.split)
    texts, groups = data.texts(index), groups_of(data, index)
    used = used_words(texts, groups, 1)
    salient = used_words(texts, groups, args.salient)
    others, with_own = (reference_words(texts, groups, own) for own in (False, True))
    candidates = np.arange(len(index))
    if args.topic:
        held = topic_groups(texts, groups, {*args.topic, *map(pluralise, args.topic)})
        candidates = np.array([i for i in candidates if groups[i] in held], dtype=np.int64)
    rng = np.random.default_rng(args.seed)
    picked = np.sort(rng.choice(candidates, min(args.rows, len(candidates)), replace=False))

    explanations: list[Explanation] = []
    started = time.perf_counter()
    for i in picked:
        query = SearchQuery(text=texts[i])
        explanations.append(engine.explain(query, row=int(index[i]), near_captions=args.captions))
    explain_ms = 1000 * (time.perf_counter() - started) / max(len(picked), 1)
    shown = [[c.name for c in e.item_concepts[: args.shown]] for e in explanations]
    item_phrases = [e.item_description.phrase if e.item_description else "" for e in explanations]
    query_phrases = [
        e.query_description.phrase if e.query_description else "" for e in explanations
    ]

    readout = engine.coder.readout
    vocabulary = list(readout.words) if readout is not None else []
    word_rows = np.stack(embed_texts(engine.encoder, None, vocabulary, None))
    nearest = nearest_words(data.embeddings[index[picked]], vocabulary, word_rows, args.shown)

    def per_query_ms(read: Callable[[np.ndarray], object]) -> float:
        """Mean milliseconds of reading one query's words (the sampled rows' embeddings)."""
        rows = data.embeddings[index[picked]]
        started = time.perf_counter()
        for x in rows:
            read(x[None, :])
        return 1000 * (time.perf_counter() - started) / max(len(rows), 1)

    words_ms = per_query_ms(engine.coder.active_words)
    gated_ms = per_query_ms(lambda x: query_words(engine.bundle, x))

    def rows_of(values: list[Any]) -> list[Any]:
        return [values[i] for i in picked]

    result: dict[str, Any] = {
        "bundles": str(args.bundles),
        "cache": str(args.cache),
        "split": args.split,
        "rows": len(picked),
        "shown": args.shown,
        "salient": args.salient,
        "topic": args.topic,
        "timing": {  # one thread's wall time, this run: the gate's share of an Explain
            "explain_ms": explain_ms,
            "query_words_ms": words_ms,
            "gated_query_words_ms": gated_ms,
            "gate_share_of_explain": (gated_ms - words_ms) / explain_ms,
        },
        "served": {
            **judged(shown, rows_of(used), rows_of(salient)),
            "item": described(item_phrases, rows_of(others)),
            "query": described(query_phrases, rows_of(with_own)),
        },
        "nearest_words": {
            **judged(nearest, rows_of(used), rows_of(salient)),
            "item": described([compose_phrase(n) for n in nearest], rows_of(others)),
        },
        "examples": [
            {
                "caption": texts[picked[j]],
                "other_captions_use": sorted(used[picked[j]]),
                "explain": format_explanation(explanations[j]),
                "nearest_words": nearest[j],
            }
            for j in np.linspace(0, len(picked) - 1, min(EXAMPLES, len(picked))).astype(int)
        ],
    }
    publish(result, args.json)


if __name__ == "__main__":
    main()
