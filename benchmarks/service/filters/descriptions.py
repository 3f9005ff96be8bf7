"""Descriptions of sparse codes, scored on held-out rows: how often their words are the image's.

For each described row r (the TEST rows of a Flickr8k bundle, whose CEDAR artifact was trained
on the TRAIN rows only) the description of r's code — its k active concepts as the bundle's
postings hold them (service/engine/descriptions.py) — is scored by the share of its distinct content
words (caption-lexicon lemmas) that occur in the OTHER captions of r's image, never r's own
(`training.cedar.descriptions.word_overlap`). Every method below goes through that same code:

- `cedar phrase`: the phrase composed from the code's strongest named concepts;
- `cedar captions`: the `--captions` gallery captions nearest to the code's reconstruction
  x̂ = Uᵀ z̃ + b in the full-length index;
- `cedar description`: the phrase and those captions together (what Explain returns);
- `raw-embedding captions` (the upper reference): the captions nearest to r's own embedding;
- `random row's phrase`, `random row's captions` (chance): the same for the code of a test row
  of another image (a seeded derangement);
- `frequent words` (chance): the corpus's most frequent content words (train captions), as
  many as r's phrase has, and `top-4 frequent words`, the same four for every row;
- `own caption` (a human's description, for scale): r's own caption.

Nearest captions never come from r's image (all its rows are excluded, not only r, or its
other captions — the references — would be copied). Scores: `mean_share` over rows whose
description has a content word, `micro_share` = Σ found / Σ words, `words` per description,
`empty` rows. Ten rows are printed beside their descriptions.

The bundle: `--bundles DIR`, or built here from `--cache` and `--cedar` into `--work`
(reused when there) with an identity GraSP-VL artifact — the full-length cosine the captions are
searched by does not depend on the rotation, and the identity keeps it the plain cosine.

    strata train cedar --cache runs/flickr-minilm --out runs/cedar-flickr --epochs 10
    python -m benchmarks.service.filters.descriptions --cache runs/flickr-minilm \\
        --cedar runs/cedar-flickr --work runs/bench/descriptions
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.format.bundle import Bundle
from indexer.format.manifest import read_current
from service.engine.descriptions import caption_column, code_phrase, nearest_captions
from service.engine.explain import row_concepts
from training.cedar.descriptions import WordOverlap, content_words, frequent_words, word_overlap
from training.core.artifacts import TransformArtifact
from training.core.cache import EmbeddingCache
from training.core.errors import InputError
from training.core.granularity import Granularity

CHUNK = 1000
EXAMPLES = 10


def flickr_bundle(cache: Path, cedar: Path, work: Path) -> Path:
    """BUNDLES folder over the cache with an identity GraSP-VL artifact (module docstring)."""
    out = work / "bundles"
    if out.is_dir() and read_current(out) is not None:
        return out
    dim = EmbeddingCache.open(cache).manifest.dim
    TransformArtifact.identity(dim, method="grasp-vl").save(work / "grasp")
    build_bundle(BuildConfig(cache=cache, grasp=work / "grasp", cedar=cedar, out=out))
    return out


def score(descriptions: Sequence[str | Sequence[str]], references: Sequence[list[str]]) -> dict:
    """The figures of one method (module docstring) over parallel descriptions / references."""
    overlaps = [
        word_overlap(d if isinstance(d, str) else " ".join(d), r)
        for d, r in zip(descriptions, references, strict=True)
    ]
    shares = [o.share for o in overlaps if o.share is not None]
    found, words = sum(o.found for o in overlaps), sum(o.words for o in overlaps)
    return {
        "mean_share": float(np.mean(shares)) if shares else None,
        "micro_share": found / words if words else None,
        "words": words / len(overlaps),
        "empty": sum(o.words == 0 for o in overlaps),
        "rows": len(overlaps),
    }


def derangement(groups: np.ndarray, seed: int) -> np.ndarray:
    """A permutation p of the positions with groups[p[i]] != groups[i] for every i."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(groups))
    for _ in range(100):
        clash = np.flatnonzero(groups[order] == groups)
        if len(clash) == 0:
            return order
        swap = rng.permutation(len(groups))[: len(clash)]
        order[clash], order[swap] = order[swap], order[clash].copy()
    raise InputError("could not pair every row with a row of another image")


def in_chunks(call: Callable[[np.ndarray], list], rows: np.ndarray) -> list:
    out: list = []
    for start in range(0, len(rows), CHUNK):
        out.extend(call(rows[start : start + CHUNK]))
    return out


def measure(bundle: Bundle, cache: Path, captions: int, limit: int, seed: int) -> dict[str, Any]:
    table = bundle.metadata(np.arange(bundle.rows))
    column = caption_column(table.column_names)
    if column is None or "group" not in table.column_names or "split" not in table.column_names:
        raise InputError("the bundle's metadata needs caption, group (image) and split columns")
    texts = [str(t or "") for t in table.column(column).to_pylist()]
    groups = np.array(table.column("group").to_pylist())
    split = np.array(table.column("split").to_pylist())
    by_group: dict[str, list[int]] = defaultdict(list)
    for row, group in enumerate(groups):
        by_group[group].append(row)
    rows = np.flatnonzero(split == "test")
    if limit:
        rows = np.sort(np.random.default_rng(seed).permutation(rows)[:limit])
    image_rows = [set(by_group[groups[r]]) for r in rows]
    references = [[texts[o] for o in by_group[groups[r]] if o != r] for r in rows]
    coder = bundle.coder

    ids, values = row_concepts(bundle, rows)
    phrases = [code_phrase(coder, c, a) for c, a in zip(ids, values, strict=True)]

    def near_code(chunk_of: np.ndarray) -> list:
        at = np.searchsorted(rows, chunk_of)
        excluded = [image_rows[i] for i in at]
        return nearest_captions(bundle, coder, ids[at], values[at], captions, excluded)

    near = [[c.text for c in found] for found in in_chunks(near_code, rows)]

    x = np.asarray(EmbeddingCache.open(cache).embeddings("text"), dtype=np.float32)
    if len(x) != bundle.rows:
        raise InputError(f"the cache has {len(x)} rows, the bundle {bundle.rows}: not its cache")
    full = bundle.prefix_length(Granularity.FULL)

    def near_raw(chunk_of: np.ndarray) -> list:
        at = np.searchsorted(rows, chunk_of)
        k = captions + max(len(image_rows[i]) for i in at)
        _, found = bundle.search_prefix(full, bundle.rotate(x[chunk_of]), k)
        return [
            [texts[r] for r in hit if r >= 0 and r not in image_rows[i]][:captions]
            for i, hit in zip(at, found, strict=True)
        ]

    raw = in_chunks(near_raw, rows)
    other = derangement(groups[rows], seed)
    train = np.flatnonzero(split == "train")
    frequent = frequent_words([texts[r] for r in train], 50)
    phrase_words = [len(content_words(p)) for p in phrases]

    methods = {
        "cedar phrase": score(phrases, references),
        "cedar captions": score(near, references),
        "cedar description": score(
            [[p, *n] for p, n in zip(phrases, near, strict=True)], references
        ),
        "raw-embedding captions": score(raw, references),
        "random row's phrase": score([phrases[i] for i in other], references),
        "random row's captions": score([near[i] for i in other], references),
        "frequent words": score([frequent[:n] for n in phrase_words], references),
        "top-4 frequent words": score([frequent[:4]] * len(rows), references),
        "own caption": score([texts[r] for r in rows], references),
    }
    pick = np.random.default_rng(seed + 1).permutation(len(rows))[:EXAMPLES]
    examples = [
        {
            "id": str(bundle.ids([int(rows[i])])[0]),
            "own caption": texts[rows[i]],
            "other captions": references[i],
            "phrase": phrases[i],
            "phrase words found": _found(word_overlap(phrases[i], references[i])),
            "nearest captions to the code": near[i],
            "nearest captions to the embedding": raw[i],
        }
        for i in pick
    ]
    return {
        "described_rows": len(rows),
        "captions_per_description": captions,
        "k": bundle.manifest.k,
        "frequent_words": frequent[:10],
        "methods": methods,
        "examples": examples,
    }


def _found(overlap: WordOverlap) -> str:
    return f"{overlap.found}/{overlap.words}"


def print_examples(examples: list[dict[str, Any]]) -> None:
    for n, e in enumerate(examples, 1):
        print(f"\n{n}. {e['id']}\n   own caption:    {e['own caption']}")
        for text in e["other captions"]:
            print(f"   other caption:  {text}")
        print(f"   phrase:         {e['phrase']!r} ({e['phrase words found']} words found)")
        for text in e["nearest captions to the code"]:
            print(f"   near the code:  {text}")


def print_table(methods: dict[str, dict]) -> None:
    print(f"\n{'method':26} {'mean share':>10} {'micro':>7} {'words':>6} {'empty':>6}")
    for name, m in methods.items():
        mean = "-" if m["mean_share"] is None else f"{m['mean_share']:.3f}"
        micro = "-" if m["micro_share"] is None else f"{m['micro_share']:.3f}"
        print(f"{name:26} {mean:>10} {micro:>7} {m['words']:>6.2f} {m['empty']:>6}")


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, required=True, help="the Flickr8k embedding cache")
    parser.add_argument("--cedar", type=Path, help="CEDAR artifact (to build the bundle)")
    parser.add_argument("--bundles", type=Path, help="a bundle of that cache (else built)")
    parser.add_argument("--work", type=Path, default=Path("runs/bench/descriptions"))
    parser.add_argument("--captions", type=int, default=3, help="nearest captions per code")
    parser.add_argument("--rows", type=int, default=0, help="test rows to describe (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/descriptions.json"))
    args = parser.parse_args(argv)
    if args.bundles is None and args.cedar is None:
        parser.error("give --bundles, or --cedar to build one from --cache")
    bundles = args.bundles or flickr_bundle(args.cache, args.cedar, args.work)
    bundle = Bundle.open(bundles).load()
    result = measure(bundle, args.cache, args.captions, args.rows, args.seed)
    result = {"benchmark": "descriptions", "bundle": str(bundles), **result}
    print_examples(result["examples"])
    print_table(result["methods"])
    return publish(result, args.json)


if __name__ == "__main__":
    main()
