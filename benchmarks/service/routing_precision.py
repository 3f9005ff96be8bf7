"""Does routing pay? Precision@10 of object, attribute and caption queries searched at the prefix
of their granularity, against the same queries searched on the full vector, through the
service's own engine on a compositional gallery.

Ground truth from the generator's factors: an object query ("a dog") is relevant to every scene
whose subject or object is a dog; an attribute query ("a red dog") to scenes whose red thing is
a dog; a caption query (a held-out scene's caption) to scenes with the same subject, subject
attribute, relation and object. Queries are drawn from the factor values; the gallery is a
cache's test split built into a bundle with the given artifacts.

    python -m benchmarks.service.routing_precision --cache runs/comp20k-minilm \\
        --grasp runs/grasp-comp20k-a03-i6k --cedar runs/cedar-comp20k
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

from benchmarks.harness import publish
from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.format.bundle import Bundle
from service.engine.search import SearchEngine
from service.results import SearchQuery
from training.core.cache import CacheManifest, EmbeddingCache, write_manifest, write_shard
from training.core.encoders import load_encoder
from training.corpora.compositional import ATTRIBUTES, SUBJECTS, noun_phrase

K = 10


def test_gallery(cache_dir: Path, out: Path) -> Path:
    """The cache's test split as a cache of its own (the gallery)."""
    cache = EmbeddingCache.open(cache_dir)
    metadata = cache.metadata()
    rows = np.flatnonzero(np.array(metadata.column("split").to_pylist()) == "test")
    x = np.asarray(cache.embeddings("text"), dtype=np.float32)[rows]
    manifest = CacheManifest(
        encoder=cache.manifest.encoder, dim=x.shape[1], dtype="float32", modalities=["text"]
    )
    manifest.shards.append(
        write_shard(out, 0, {"text": x}, metadata.take(pa.array(rows)), "float32")
    )
    manifest.complete = True
    write_manifest(out, manifest)
    return out


def precision(engine: SearchEngine, text: str, granularity: str, relevant: np.ndarray) -> float:
    result = engine.search(SearchQuery.of(text, granularity=granularity, k=K))
    rows = [h.row for h in result.hits]
    return float(relevant[rows].mean()) if rows else 0.0


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--grasp", type=Path, required=True)
    parser.add_argument("--cedar", type=Path, required=True)
    parser.add_argument("--captions", type=int, default=100)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/routing_precision.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="strata-routing-") as folder:
        gallery = test_gallery(args.cache, Path(folder) / "gallery")
        bundles = Path(folder) / "bundles"
        build_bundle(
            BuildConfig(
                cache=gallery, grasp=args.grasp, cedar=args.cedar, out=bundles, progress=False
            )
        )
        bundle = Bundle.open(bundles)
        engine = SearchEngine(bundle, load_encoder(bundle.manifest.encoder, device="cpu"))
        meta = bundle.metadata(np.arange(bundle.rows)).to_pydict()
        subject, obj = np.array(meta["subject"]), np.array(meta["object"])
        attribute = np.array(meta["subject_attribute"])
        relation = np.array(meta["relation"])
        queries: dict[str, list[tuple[str, np.ndarray]]] = {"object": [], "attribute": []}
        for noun in SUBJECTS:
            queries["object"].append((noun_phrase(None, noun), (subject == noun) | (obj == noun)))
            for adjective in ATTRIBUTES:
                relevant = (subject == noun) & (attribute == adjective)
                if relevant.sum() >= K:
                    queries["attribute"].append((noun_phrase(adjective, noun), relevant))
        rng = np.random.default_rng(0)
        queries["caption"] = [
            (
                meta["caption"][i],
                (subject == subject[i])
                & (attribute == attribute[i])
                & (relation == relation[i])
                & (obj == obj[i]),
            )
            for i in rng.choice(bundle.rows, args.captions, replace=False)
        ]
        table = {}
        for granularity, items in queries.items():
            routed = [precision(engine, q, granularity, rel) for q, rel in items]
            full = [precision(engine, q, "full", rel) for q, rel in items]
            table[granularity] = {
                "queries": len(items),
                "prefix_length": bundle.prefix_length(granularity),
                "precision_at_10_routed": float(np.mean(routed)),
                "precision_at_10_full": float(np.mean(full)),
            }
    result = {
        "benchmark": "routing_precision",
        "gallery_rows": bundle.rows,
        "grasp": str(args.grasp),
        "cedar": str(args.cedar),
        "results": table,
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
