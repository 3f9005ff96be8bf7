"""Ten concept-filtered searches, as a user sees them, each hit judged.

On the bundle of `benchmarks.service.filters.filter_latency` (Flickr8k's captions, a CEDAR artifact
with a vocabulary readout), one text query per word, `require` the word, top 5. Each hit is judged
as the filter benchmark judges rows (training.cedar.naming.word_relevance): relevant when at least 2
*other* captions of its image use the word, so the hit's own caption does not count.

    python -m benchmarks.service.filters.filter_examples
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.harness import benchmark_parser, publish
from benchmarks.service.filters.filter_latency import word_bundle
from indexer.format.bundle import Bundle
from service.engine.search import SearchEngine
from service.results import SearchQuery
from training.cedar.caption_words import caption_vocabulary
from training.cedar.data import load_split_rows
from training.cedar.naming import OTHER_CAPTIONS
from training.core.encoders import load_encoder

SEARCHES = (
    ("a dog playing outside", "snow"),
    ("a dog playing outside", "water"),
    ("a person on a street", "bicycle"),
    ("children playing", "ball"),
    ("a man outdoors", "mountain"),
    ("people at an event", "crowd"),
    ("a woman walking", "red"),
    ("someone jumping", "skateboard"),
    ("an animal running", "grass"),
    ("a group of people", "beach"),
)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, default=Path("runs/flickr-minilm"))
    parser.add_argument("--cedar", type=Path, default=Path("runs/cedar-flickr"))
    parser.add_argument("--work", type=Path, default=Path("runs/bench/filter-latency"))
    parser.add_argument("--json", type=Path, default=Path("runs/bench/filter_examples.json"))
    args = parser.parse_args()
    bundle = Bundle.open(word_bundle(args.cache, args.cedar, args.work))
    engine = SearchEngine(bundle, load_encoder(bundle.manifest.encoder, device="cpu"))
    data = load_split_rows(args.cache)
    captions = data.texts(range(len(data.split)))
    groups = [str(g) for g in data.metadata.column("group").to_pylist()]
    vocab = caption_vocabulary(captions, min_count=1)
    members: dict[str, list[int]] = {}
    for row, group in enumerate(groups):
        members.setdefault(group, []).append(row)
    out = []
    for text, word in SEARCHES:
        result = engine.search(SearchQuery.of(text, k=5, require=[word]))
        index = vocab.words.index(word) if word in vocab.words else -1
        hits = []
        for hit in result.hits:
            others = [r for r in members[groups[hit.row]] if r != hit.row]
            uses = sum(index in vocab.mentions(captions[r]) for r in others)
            hits.append(
                {
                    "caption": captions[hit.row],
                    "score": round(hit.score, 3),
                    "relevant": uses >= OTHER_CAPTIONS,
                }
            )
        print(f'\nstrata search "{text}" --require {word}')
        for h in hits:
            mark = "relevant" if h["relevant"] else "not     "
            print(f"  {h['score']:.3f}  {mark}  {h['caption']}")
        out.append({"query": text, "require": word, "hits": hits})
    relevant = sum(h["relevant"] for s in out for h in s["hits"])
    shown = sum(len(s["hits"]) for s in out)
    publish({"searches": out, "relevant": relevant, "hits": shown}, args.json)


if __name__ == "__main__":
    main()
