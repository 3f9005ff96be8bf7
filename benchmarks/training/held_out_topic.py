"""A captioned cache with one topic taken out of training: a gallery whose subject the artifacts
never saw, made from data at hand.

Every row of an image whose captions use any of `--words` (each word's plural too) leaves the
train and val splits (its split becomes `held-out`), so a CEDAR (or GraSP-VL) artifact trained
on the written cache never reads a caption of that topic. The original cache, indexed whole,
is then the gallery, and its test rows of the topic's images are rows nothing was fitted or
tuned on — as a user's gallery of a subject the training corpus lacks (giraffes on a corpus
of dogs and people).

    python -m benchmarks.training.held_out_topic --cache runs/demo/cache-flickr8k-minilm \\
        --words dog puppy --out runs/flickr8k-no-dogs
    strata train cedar --seed 0 --cache runs/flickr8k-no-dogs --out runs/cedar-no-dogs

The cache written shares the embeddings (the same shards' bytes) and changes only the
metadata's `split` column.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa

from benchmarks.harness import benchmark_parser, publish
from training.cedar.data import groups_of, load_split_rows
from training.core.cache import EmbeddingCache, write_manifest, write_shard
from training.core.lexicon.nouns import pluralise

HELD_OUT = "held-out"


def topic_groups(texts: list[str], groups: list[str], words: set[str]) -> set[str]:
    """The groups (images) any of whose captions uses one of `words` (whole tokens)."""
    found = set()
    for text, group in zip(texts, groups, strict=True):
        tokens = {t.strip(".,;:!?\"'()").lower() for t in text.split()}
        if tokens & words:
            found.add(group)
    return found


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--words", nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/held_out_topic.json"))
    args = parser.parse_args()
    words = {w.lower() for w in args.words} | {pluralise(w.lower()) for w in args.words}
    data = load_split_rows(args.cache)
    every = np.arange(len(data.split))
    held = topic_groups(data.texts(every), groups_of(data, every), words)
    in_topic = np.array([g in held for g in groups_of(data, every)])
    raw = np.array(data.metadata.column("split").to_pylist(), dtype=object)
    split = np.where(in_topic & (data.split != "test"), HELD_OUT, raw)
    metadata = data.metadata.set_column(
        data.metadata.column_names.index("split"), "split", pa.array(split.tolist())
    )
    source = EmbeddingCache.open(args.cache)
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    embeddings = {m: np.asarray(source.embeddings(m)) for m in source.manifest.modalities}
    shard = write_shard(args.out, 0, embeddings, metadata, source.manifest.dtype)
    manifest = json.loads(source.manifest.to_json())
    manifest.pop("rows", None)
    cache_manifest = type(source.manifest)(**{**manifest, "shards": [], "complete": True})
    cache_manifest.shards = [shard]
    cache_manifest.job = {**cache_manifest.job, "held_out_topic": sorted(words)}
    write_manifest(args.out, cache_manifest)
    publish(
        {
            "cache": str(args.cache),
            "out": str(args.out),
            "words": sorted(words),
            "images_held_out": len(held),
            "rows_held_out_of_training": int((split == HELD_OUT).sum()),
            "test_rows_of_the_topic": int((in_topic & (data.split == "test")).sum()),
        },
        args.json,
    )


if __name__ == "__main__":
    main()
