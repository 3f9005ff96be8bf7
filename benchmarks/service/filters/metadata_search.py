"""Metadata-filtered and grouped search on a real bundle, checked against brute force.

The bundle: Flickr8k's 40,460 MiniLM captions (`runs/flickr-minilm`, metadata columns
`group` = the image file, `split` = train | dev | test | none), built by the indexer with an
identity GraSP-VL artifact and a random CEDAR artifact (the filter's correctness does not
depend on the transforms), or any bundle given with `--bundle`. Queries are `--queries` caption
rows of the cache drawn with `--seed`, sent as vectors through `SearchEngine.search`.

1. filtered: for each condition set (split = test; split IN dev,test; split = none; group IN
   50 images; split = test with a concept excluded), at the full and the object prefix, plan
   direct, and with `exact_max` 0 (FAISS's ID selector) and the default (exact scoring of small
   sets): the hits against the exact top-10 of the qualifying rows by a NumPy scan of the
   bundle's own rotated rows — the share of queries answered exactly, recall@10, and whether
   every query got min(10, qualifying) hits, every one of them qualifying;
2. grouped: group_by "group" (one hit per image), top 5: distinct images in the ungrouped and
   grouped top 5, and the grouped answer against brute force (the 5 images of best caption
   score, each with its best caption: the same rows, and — as equal captions of different
   images tie exactly, which FAISS may order either way — the same scores); the query whose
   ungrouped top 5 held the fewest images, shown in full; with `--text`, one text query too.

    python -m benchmarks.service.filters.metadata_search
    python -m benchmarks.service.filters.metadata_search --queries 200 \
        --text "a dog runs on the beach"
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.format.bundle import Bundle
from service.engine.filtering import allowed_rows
from service.engine.search import EngineConfig, SearchEngine
from service.results import ConceptRef, MetadataCondition, SearchQuery
from training.core.artifacts import TransformArtifact
from training.core.cache import EmbeddingCache
from training.core.granularity import Granularity
from training.core.metrics import prefix_vectors
from training.synthetic import random_cedar_artifact

K = 10


def flickr_bundle(cache: Path, work: Path) -> Path:
    """BUNDLES folder over `cache` (identity GraSP-VL, random CEDAR); built once in `work`."""
    out = work / "bundles"
    if (out / "CURRENT").is_file():
        return out
    x = EmbeddingCache.open(cache).embeddings("text").astype(np.float32)
    TransformArtifact.identity(x.shape[1], method="grasp-vl").save(work / "grasp")
    random_cedar_artifact(x.shape[1], 32, x[:5000]).save(work / "cedar")
    build_bundle(
        BuildConfig(
            cache=cache, grasp=work / "grasp", cedar=work / "cedar", out=out, progress=False
        )
    )
    return out


def exact_top(gallery: np.ndarray, query: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """The k best of `rows` by inner product with the gallery's prefix rows (ties by row)."""
    scores = gallery[rows] @ query
    return rows[np.lexsort((rows, -scores))[:k]]


def filtered_part(
    engines: dict[str, SearchEngine], x: np.ndarray, picks: np.ndarray, seed: int
) -> list[dict]:
    engine = next(iter(engines.values()))
    bundle = engine.bundle
    table = engine.metadata.table
    split = np.array(table.column("split").to_pylist())
    group = np.array(table.column("group").to_pylist())
    images = np.random.default_rng(seed + 1).choice(np.unique(group), 50, replace=False)
    concept = bundle.coder.catalog[0].name
    banned = allowed_rows(bundle, [], [ConceptRef(name=concept)])
    test_rows = np.flatnonzero(split == "test")
    cases = {
        "split = test": ([MetadataCondition("split", equals="test")], (), test_rows),
        "split IN dev,test": (
            [MetadataCondition("split", any_of=("dev", "test"))],
            (),
            np.flatnonzero(np.isin(split, ["dev", "test"])),
        ),
        "split = none": (
            [MetadataCondition("split", equals="none")],
            (),
            np.flatnonzero(split == "none"),
        ),
        "group IN 50 images": (
            [MetadataCondition("group", any_of=tuple(images.tolist()))],
            (),
            np.flatnonzero(np.isin(group, images)),
        ),
        f"split = test, exclude {concept}": (
            [MetadataCondition("split", equals="test")],
            (concept,),
            banned.within(test_rows).materialise(),
        ),
    }
    rotated = bundle.rotate(x[picks] / np.linalg.norm(x[picks], axis=1, keepdims=True))
    rows_all = bundle.rotate(x)
    report = []
    for granularity in (Granularity.FULL, Granularity.OBJECT):
        length = bundle.contract[granularity]
        gallery = prefix_vectors(rows_all, length)
        queries = prefix_vectors(rotated, length)
        for name, (where, exclude, qualifying) in cases.items():
            for arm, served in engines.items():
                exact, recall, complete = 0, [], True
                for j, pick in enumerate(picks):
                    result = served.search(
                        SearchQuery.of(
                            vector=x[pick],
                            granularity=granularity.value,
                            k=K,
                            where=where,
                            exclude=exclude,
                            plan="direct",
                        )
                    )
                    found = np.array([h.row for h in result.hits], dtype=np.int64)
                    truth = exact_top(gallery, queries[j], qualifying, K)
                    exact += int(np.array_equal(found, truth))
                    recall.append(len(np.intersect1d(found, truth)) / max(1, len(truth)))
                    complete &= len(found) == min(K, len(qualifying))
                    complete &= bool(np.isin(found, qualifying).all())
                    complete &= result.filtered_rows == len(qualifying)
                report.append(
                    {
                        "conditions": name,
                        "granularity": granularity.value,
                        "prefix": length,
                        "strategy": arm,
                        "qualifying_rows": len(qualifying),
                        "queries": len(picks),
                        "exact_answers": exact / len(picks),
                        "recall_at_10": float(np.mean(recall)),
                        "k_hits_all_qualifying": complete,
                    }
                )
                print(report[-1])
    return report


def shown(result, captions: list[str]) -> list[dict]:
    return [
        {
            "score": round(h.score, 4),
            "image": h.group or h.metadata.get("group"),
            "caption": captions[h.row],
        }
        for h in result.hits
    ]


def grouped_part(engine: SearchEngine, x: np.ndarray, picks: np.ndarray) -> dict:
    bundle = engine.bundle
    group = np.array(engine.metadata.table.column("group").to_pylist())
    captions = engine.metadata.table.column("caption").to_pylist()
    length = bundle.contract[Granularity.FULL]
    gallery = prefix_vectors(bundle.rotate(x), length)
    queries = prefix_vectors(
        bundle.rotate(x[picks] / np.linalg.norm(x[picks], axis=1)[:, None]), length
    )
    distinct_plain, distinct_grouped, matches, same_scores = [], [], 0, 0
    example: dict = {}
    for j, pick in enumerate(picks):
        base = {"vector": x[pick], "granularity": "full", "k": 5, "plan": "direct"}
        plain = engine.search(SearchQuery.of(**base, metadata_fields=["group"]))
        grouped = engine.search(SearchQuery.of(**base, group_by="group"))
        distinct_plain.append(len({h.metadata["group"] for h in plain.hits}))
        distinct_grouped.append(len({h.group for h in grouped.hits}))
        scores = gallery @ queries[j]
        ranked = np.lexsort((np.arange(len(gallery)), -scores))
        best: dict[str, int] = {}
        for row in ranked:
            best.setdefault(group[row], int(row))
            if len(best) == 5:
                break
        matches += [h.row for h in grouped.hits] == list(best.values())
        # equal captions of different images tie exactly; FAISS may order a tie either way
        found = [h.score for h in grouped.hits]
        same_scores += bool(np.allclose(found, scores[list(best.values())], atol=1e-5))
        if not example or distinct_plain[-1] < example["ungrouped_distinct_images"]:
            example = {
                "query_caption_row": int(pick),
                "query": captions[pick],
                "ungrouped_distinct_images": distinct_plain[-1],
                "ungrouped": shown(plain, captions),
                "grouped": shown(grouped, captions),
            }
    return {
        "queries": len(picks),
        "ungrouped_top5_distinct_images_mean": float(np.mean(distinct_plain)),
        "ungrouped_top5_with_a_repeated_image": float(np.mean(np.array(distinct_plain) < 5)),
        "grouped_top5_distinct_images_min": int(min(distinct_grouped)),
        "grouped_rows_equal_to_brute_force": matches / len(picks),
        "grouped_scores_equal_to_brute_force": same_scores / len(picks),
        "example_fewest_distinct_images_ungrouped": example,
    }


def text_example(bundle_dir: Path, text: str) -> dict:
    """One text query, ungrouped and grouped by image (MiniLM, loaded only here)."""
    engine = SearchEngine.open(bundle_dir, device="cpu", verify=False)
    shown = ["group", "caption"]
    out = {}
    for name, extra in (("ungrouped", {}), ("grouped", {"group_by": "group"})):
        result = engine.search(
            SearchQuery.of(text, granularity="full", k=5, metadata_fields=shown, **extra)
        )
        out[name] = [
            {
                "score": round(h.score, 4),
                "image": h.metadata["group"],
                "caption": h.metadata["caption"],
            }
            for h in result.hits
        ]
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, default=Path("runs/flickr-minilm"))
    parser.add_argument("--bundle", type=Path, default=None, help="an existing BUNDLES folder")
    parser.add_argument("--work", type=Path, default=Path("runs/bench/flickr-metadata"))
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--text", default="a little girl climbing into a wooden playhouse")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/metadata_search.json"))
    args = parser.parse_args(argv)
    bundle_dir = args.bundle or flickr_bundle(args.cache, args.work)
    bundle = Bundle.open(bundle_dir)
    engines = {
        "faiss-selector": SearchEngine(bundle, None, EngineConfig(exact_max=0)),
        "default": SearchEngine(bundle, None),
    }
    x = EmbeddingCache.open(args.cache).embeddings("text").astype(np.float32)
    picks = np.random.default_rng(args.seed).choice(len(x), args.queries, replace=False)
    result = {
        "bundle": str(bundle.path),
        "rows": bundle.rows,
        "factories": {p.length: p.factory for p in bundle.manifest.prefixes},
        "filtered": filtered_part(engines, x, picks, args.seed),
        "grouped": grouped_part(engines["default"], x, picks),
    }
    if args.text:
        result["example"] = {"text": args.text, **text_example(bundle_dir, args.text)}
    return publish(result, args.json)


if __name__ == "__main__":
    main()
