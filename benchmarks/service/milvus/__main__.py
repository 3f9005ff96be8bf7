"""The Milvus backend against local FAISS on the same bundle, in the same run.

1. `serve`: a spectrum bundle (benchmarks/service/layout/funnel.spectrum_bundle: every prefix
   Flat) of --rows rows, exported to Milvus (Milvus Lite, a gRPC server in this process, unless --to
   names another engine), then searched with the same vector queries through the local
   local `SearchEngine` and the Milvus-backed one:
   - parity: the share of queries whose top-10 is the same list, and recall@10 against local
     Flat, at every granularity, unfiltered and filtered (require the busiest concept, exclude
     the next: a filter on about half the rows); for Milvus FLAT and, exported again, Milvus
     HNSW (M 32, efConstruction 200, ef --ef) unfiltered;
   - latency: the median of one-query searches, the two engines timed one after another for
     every query (benchmarks.training.interleaved), and its ratio Milvus / FAISS, per
     granularity, unfiltered and filtered;
   - QPS: batches of --batch vector queries through `search_batch`, interleaved the same way.
   With --bundles (a bundle directory with an encoder, e.g. the demo's), the same parity and
   latency for text queries (its own captions, --queries of them) on that bundle too.
2. `export`: the time to export --export-rows rows of a spectrum bundle (build time apart),
   and the collection's size on Milvus Lite's disk, both per 100k rows.
3. `words` (with --bundles and --cache, the cache the bundle was built from, e.g. the demo's):
   the word-concept filter through each engine (--words-max: the most frequent N words only),
   scored with one metric code
   (training.cedar.filter_quality) on the cache's test rows, a row relevant to a word when at
   least 2 other captions of its image use it: every frequent word of those captions is
   required alone; the local engine's allowed rows (its postings), and Milvus's, read back by
   the very expression the Milvus scorer sends with a search (`MilvusScorer.restrict`), then
   macro precision and recall of each, the words whose two row sets differ, and the largest
   difference.

    python -m benchmarks.service.milvus --rows 20000 --json runs/bench/milvus.json
    python -m benchmarks.service.milvus --rows 5000 --bundles runs/demo/bundles-flickr8k
    python -m benchmarks.service.milvus --parts export --export-rows 1000000
    python -m benchmarks.service.milvus --parts words --bundles runs/demo/bundles-flickr8k \
        --cache runs/demo/cache-flickr8k-minilm

Milvus Lite is Milvus's single-process engine (pure Python in milvus-lite 3): its figures say
what a replica pays per engine round trip and scan here, not what a cluster's query nodes do.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import benchmark_parser, interleaved, publish
from benchmarks.service.layout.funnel import spectrum_bundle
from benchmarks.service.milvus import milvus_target
from indexer.format.bundle import Bundle
from indexer.format.funnel_plans import FunnelConfig
from indexer.milvus.export import export_bundle
from indexer.milvus.store import MilvusStore
from service.engine.milvus.backend import milvus_engine
from service.engine.search import EngineConfig, SearchEngine
from service.errors import QueryError
from service.query.cache import QueryCache
from service.results import SearchQuery
from training.synthetic import spectrum_rows

FILTERS = ("unfiltered", "filtered")


def filters_of(bundle: Bundle) -> dict[str, dict[str, Any]]:
    """SearchQuery options per filter kind: none, and require the busiest concept while
    excluding the next busiest (concept ids, as the engines resolve them)."""
    busiest = np.argsort(-np.diff(bundle._postings.indptr[:]), kind="stable")[:2]
    return {
        "unfiltered": {},
        "filtered": {"require": [int(busiest[0])], "exclude": [int(busiest[1])]},
    }


def queries_of(bundle: Bundle, inputs: list[Any], granularity: str, filters: dict) -> list:
    """One SearchQuery per text or vector of `inputs`."""
    return [
        SearchQuery.of(x, granularity=granularity, k=10, **filters)
        if isinstance(x, str)
        else SearchQuery.of(vector=x, granularity=granularity, k=10, **filters)
        for x in inputs
    ]


def parity(
    local: SearchEngine, remote: SearchEngine, inputs: list[Any], kinds: tuple[str, ...] = FILTERS
) -> dict[str, Any]:
    """Per granularity and filter: same top-10 (share of queries) and recall@10 against local
    Flat, and the filter's allowed rows on both engines."""
    out: dict[str, Any] = {}
    for granularity in local.contract:
        for kind, filters in filters_of(local.bundle).items():
            if kind not in kinds:
                continue
            same, recall, allowed = 0, [], set()
            for query in queries_of(local.bundle, inputs, granularity, filters):
                a, b = local.search(query), remote.search(query)
                same += a.ids == b.ids
                recall.append(len(set(a.ids) & set(b.ids)) / max(1, len(a.ids)))
                allowed.add((a.filtered_rows, b.filtered_rows))
            out[f"{granularity}/{kind}"] = {
                "same_top10": same / len(inputs),
                "recall_at_10": float(np.mean(recall)),
                "filtered_rows_local_milvus": sorted(allowed, key=str)[0],
                "queries": len(inputs),
            }
    return out


def timing(
    local: SearchEngine, remote: SearchEngine, inputs: list[Any], rounds: int, batch: int
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for granularity in local.contract:
        for kind, filters in filters_of(local.bundle).items():
            one = queries_of(local.bundle, inputs, granularity, filters)
            single = interleaved(
                {
                    "faiss": lambda i, one=one: local.search(one[i % len(one)]),
                    "milvus": lambda i, one=one: remote.search(one[i % len(one)]),
                },
                len(one),
                rounds,
            )
            entry: dict[str, Any] = {
                "p50_ms": {k: v * 1000 for k, v in single.items()},
                "p50_ratio_milvus_over_faiss": single["milvus"] / single["faiss"],
            }
            if kind == "unfiltered" and batch > 1:
                batches = [one[s : s + batch] for s in range(0, len(one) - batch + 1, batch)]
                batches = batches or [one]
                batched = interleaved(
                    {
                        "faiss": lambda i, b=batches: local.search_batch(b[i % len(b)]),
                        "milvus": lambda i, b=batches: remote.search_batch(b[i % len(b)]),
                    },
                    len(batches),
                    rounds,
                )
                size = len(batches[0])
                entry |= {
                    "qps": {k: size / v for k, v in batched.items()},
                    "qps_ratio_milvus_over_faiss": batched["faiss"] / batched["milvus"],
                    "batch": size,
                }
            out[f"{granularity}/{kind}"] = entry
    return out


def text_part(args: Any, work: Path) -> dict[str, Any]:
    """Text queries (the bundle's own captions) on a bundle with an encoder, both engines."""
    from training.core.encoders import load_encoder

    bundle = Bundle.open(args.bundles)
    encoder = load_encoder(bundle.manifest.encoder, device="cpu")
    config = EngineConfig(funnel=FunnelConfig(enabled=False))
    cache = QueryCache()  # shared: each text embedded once, both engines time the search
    local = SearchEngine(bundle, encoder, config, cache)
    table = bundle.metadata_table()
    column = "caption" if "caption" in table.column_names else "text"
    picked = np.random.default_rng(7).choice(bundle.rows, min(args.queries, bundle.rows), False)
    texts = [str(t) for t in table.column(column).take(np.sort(picked)).to_pylist()]
    with milvus_target(args.to, work / "text.db") as target:
        store = MilvusStore(target, timeout_s=600)
        summary = export_bundle(bundle, store, "bench-text")
        remote = milvus_engine(
            bundle, encoder, store, summary.collection, config, cache, name="bench-text"
        )
        local.search_batch([SearchQuery.of(q) for q in texts])  # every text in the cache
        result = {
            "bundle": str(bundle.path),
            "rows": bundle.rows,
            "export_seconds": summary.seconds,
            "parity": parity(local, remote, texts),
            "timing": timing(local, remote, texts, args.rounds, 1),
        }
        store.close()
    return result


def serve_part(args: Any, work: Path) -> dict[str, Any]:
    started = time.perf_counter()
    bundles = spectrum_bundle(work / "serve", args.rows, args.dim, 1.0)
    built = time.perf_counter() - started
    bundle = Bundle.open(bundles)
    config = EngineConfig(funnel=FunnelConfig(enabled=False))  # direct, as the engine scans
    local = SearchEngine(bundle, None, config)
    with milvus_target(args.to, work / "lite.db") as target:
        store = MilvusStore(target, timeout_s=600)
        flat = export_bundle(bundle, store, "bench", index_kind="FLAT")
        remote = milvus_engine(bundle, None, store, flat.collection, config, name="bench")
        queries = list(spectrum_rows(args.queries, args.dim, 1.0, seed=99))
        result: dict[str, Any] = {
            "rows": args.rows,
            "dim": args.dim,
            "engine": args.to or "milvus-lite (in-process gRPC server)",
            "build_seconds": built,
            "export_seconds": flat.seconds,
            "parity_flat": parity(local, remote, queries),
            "timing_flat": timing(local, remote, queries, args.rounds, args.batch),
        }
        store.client.drop_alias("bench")
        hnsw = export_bundle(bundle, store, "bench-hnsw", index_kind="HNSW")
        remote_hnsw = milvus_engine(
            bundle, None, store, hnsw.collection, config, name="bench-hnsw", ef=args.ef
        )
        result["parity_hnsw"] = parity(local, remote_hnsw, queries, ("unfiltered",)) | {
            "ef": args.ef
        }
        result["hnsw_export_seconds"] = hnsw.seconds
        store.close()
    return result


def export_part(args: Any, work: Path) -> dict[str, Any]:
    started = time.perf_counter()
    bundles = spectrum_bundle(work / "export", args.export_rows, args.dim, 1.0)
    built = time.perf_counter() - started
    with milvus_target(args.to, work / "export.db") as target:
        store = MilvusStore(target, timeout_s=3600)
        summary = export_bundle(Bundle.open(bundles), store, "bench-export", index_kind="FLAT")
        store.close()
    size = folder_bytes(work / "export.db") if not args.to else None
    per = 100_000 / args.export_rows
    return {
        "rows": args.export_rows,
        "dim": args.dim,
        "prefixes": Bundle.open(bundles).prefix_lengths,
        "build_seconds": built,
        "export_seconds": summary.seconds,
        "rows_per_second": args.export_rows / summary.seconds,
        "export_seconds_per_100k_rows": summary.seconds * per,
        "collection_bytes": size,
        "collection_mb_per_100k_rows": None if size is None else size * per / 1e6,
    }


def words_part(args: Any, work: Path) -> dict[str, Any]:
    """Word filters through the local engine and Milvus, scored alike (module docstring, 3)."""
    from service.engine.scoring import PreparedQuery
    from training.cedar.data import load_split_rows
    from training.cedar.filter_quality import filter_quality
    from training.cedar.gallery_quality import judged_words

    bundle = Bundle.open(args.bundles)
    g = load_split_rows(args.cache)
    if bundle.ids(np.arange(bundle.rows)) != g.metadata.column("id").to_pylist():
        raise SystemExit(f"milvus: {bundle.path} was not built from {args.cache} row for row")
    test = g.rows("test")
    vocab, relevant, words = judged_words(g, test)
    words = words[: args.words_max]  # each costs Milvus Lite a count and a scan (seconds)
    names = [vocab.words[w] for w in words]
    wanted = relevant[:, words].T.toarray().astype(bool)
    local = SearchEngine(bundle, None, EngineConfig(funnel=FunnelConfig(enabled=False)))
    with milvus_target(args.to, work / "words.db") as target:
        store = MilvusStore(target, timeout_s=600)
        summary = export_bundle(bundle, store, "bench-words")
        remote = milvus_engine(
            bundle, None, store, summary.collection, local.config, name="bench-words"
        )
        allowed = {side: np.zeros((len(names), len(test)), dtype=bool) for side in ENGINES}
        covered = np.zeros(len(names), dtype=bool)
        for w, name in enumerate(names):
            prepared = PreparedQuery(SearchQuery.of(vector=[1.0], require=[name]))
            prepared.length = max(bundle.prefix_lengths)
            try:
                local.scorer.restrict(prepared)
            except QueryError:  # no concept of that name: neither engine has a filter for it
                continue
            covered[w] = True
            allowed["local"][w] = prepared.allowed.mask()[test]
            remote.scorer.restrict(prepared)
            rows = milvus_rows(store, summary.collection, prepared.allowed.expression)
            on = np.zeros(bundle.rows, dtype=bool)
            on[rows] = True
            allowed["milvus"][w] = on[test]
        classes = [vocab.classes[w] for w in words]
        quality = {
            side: filter_quality(allowed[side], covered, wanted, classes)["all"] for side in ENGINES
        }
        differ = [
            n for w, n in enumerate(names) if (allowed["local"][w] != allowed["milvus"][w]).any()
        ]
        store.close()
    gap = {m: abs(quality["local"][m] - quality["milvus"][m]) for m in ("precision", "recall")}
    return {
        "bundle": str(bundle.path),
        "test_rows": len(test),
        "words": len(names),
        "covered": int(covered.sum()),
        "quality": quality,
        "largest_difference": gap,
        "words_whose_rows_differ": differ,
    }


ENGINES = ("local", "milvus")


def milvus_rows(store: MilvusStore, collection: str, expression: str) -> np.ndarray:
    """Every row an expression admits in a collection (a query iterator: no top-k cap)."""
    from indexer.milvus.store import ROW

    iterator = store.client.query_iterator(
        collection, batch_size=8192, filter=expression, output_fields=[ROW]
    )
    rows: list[int] = []
    while batch := iterator.next():
        rows.extend(int(r[ROW]) for r in batch)
    iterator.close()
    return np.asarray(rows, dtype=np.int64)


def folder_bytes(folder: Path) -> int:
    """Bytes of every file under a Milvus Lite data folder."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--parts", default="serve,export")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--export-rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--ef", type=int, default=64)
    parser.add_argument("--to", default=None, help="an engine to use instead of Milvus Lite")
    parser.add_argument("--bundles", type=Path, default=None, help="text queries on this bundle")
    parser.add_argument("--cache", type=Path, default=None, help="--bundles' cache (words)")
    parser.add_argument("--words-max", type=int, default=None, help="words: the first N only")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/milvus.json"))
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir="runs") as work:
        if "serve" in parts:
            result["serve"] = serve_part(args, Path(work))
        if "export" in parts:
            result["export"] = export_part(args, Path(work))
        if args.bundles is not None and "words" not in parts:
            result["text"] = text_part(args, Path(work))
        if "words" in parts:
            if args.bundles is None or args.cache is None:
                raise SystemExit("milvus: --parts words needs --bundles and --cache")
            result["words"] = words_part(args, Path(work))
    return publish(result, args.json)


if __name__ == "__main__":
    main()
