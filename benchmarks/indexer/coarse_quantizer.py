"""The shortlist codes' coarse quantizer at scale: a flat one against an HNSW graph over the same
centroids, side by side on one bundle.

The bundle's shortest prefix is IVF codes reranked from the store (indexer/format/store_rerank.py).
Its coarse quantizer picks the nprobe lists a search reads: a flat one scores every centroid,
nlist·S floats a query; a graph (`IVF{nlist}_HNSW32`, the rule from 8,192 lists up:
indexer/format/index_plan.py) walks to them. Over the same centroids and the same lists, this
times one object search (one thread, `--queries` held-out gallery rows, interleaved rounds) with
each quantizer: the quantizer alone, the codes' search, and the whole search with its rerank;
and reports the share of the flat quantizer's lists the graph finds, and the recall@10 of the
graph's answers against the flat one's.

    python -m benchmarks.service.layout.scale --rows 10000000          # builds runs/bench/scale
    python -m benchmarks.indexer.coarse_quantizer --bundles runs/bench/scale/bundles --rows 10000000
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np

from benchmarks.harness import benchmark_parser, publish
from benchmarks.service.layout.scale import held_out, held_out_rows
from indexer.format.bundle import Bundle
from indexer.format.store_rerank import StoreRerank
from training.core.metrics import neighbour_recall, prefix_vectors

K = 10
EFS = (16, 32, 64)


def p50_ms(search: Callable[[np.ndarray], object], queries: np.ndarray) -> float:
    times = []
    for q in queries:
        tick = time.perf_counter()
        search(q[None])
        times.append(time.perf_counter() - tick)
    return float(np.median(times) * 1e3)


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--bundles", type=Path, default=Path("runs/bench/scale/bundles"))
    parser.add_argument("--rows", type=int, default=10_000_000, help="the scale run's --rows")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/coarse_quantizer.json"))
    args = parser.parse_args(argv)
    faiss.omp_set_num_threads(1)
    bundle = Bundle.open(args.bundles)
    bundle.load()
    length = min(bundle.prefix_lengths)
    index = bundle.index(length)
    if not isinstance(index, StoreRerank):
        raise SystemExit(f"coarse_quantizer: prefix {length} of {args.bundles} holds no IVF codes")
    ivf = faiss.extract_index_ivf(index.base.faiss)
    own = ivf.quantizer
    centroids = own.reconstruct_n(0, ivf.nlist)
    flat = faiss.IndexFlatIP(length)
    flat.add(centroids)
    graphs = {}
    for ef in EFS:
        graph = faiss.IndexHNSWFlat(length, 32, faiss.METRIC_INNER_PRODUCT)
        graph.add(centroids)
        graph.hnsw.efSearch = ef
        graphs[f"graph ef {ef}"] = graph
    quantizers = {"flat": flat, **graphs}
    selves = held_out(args.rows, args.queries)
    queries = prefix_vectors(bundle.rotate(held_out_rows(selves, args.rows, bundle.dim)), length)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    fetch = index.fetch(K + 1)
    answers, lists = {}, {}
    for name, quantizer in quantizers.items():
        ivf.quantizer = quantizer
        lists[name] = quantizer.search(queries, ivf.nprobe)[1]
        answers[name] = np.stack([index.search(q[None], K + 1)[1][0] for q in queries])
    times: dict[str, dict[str, list[float]]] = {n: {} for n in quantizers}
    names = list(quantizers)
    for round_ in range(args.rounds):  # interleaved: every quantizer in turn, rotating
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            quantizer = quantizers[name]
            ivf.quantizer = quantizer
            for part, search in (
                ("quantizer", lambda q, qz=quantizer: qz.search(q, ivf.nprobe)),
                ("codes", lambda q: index.base.search(q, fetch)),
                ("whole search", lambda q: index.search(q, K + 1)),
            ):
                times[name].setdefault(part, []).append(p50_ms(search, queries))
    ivf.quantizer = own
    result: dict = {
        "bundle": str(args.bundles),
        "rows": bundle.rows,
        "prefix": length,
        "nlist": int(ivf.nlist),
        "nprobe": int(ivf.nprobe),
        "k_factor": index.k_factor,
        "quantizers": {},
    }
    for name in quantizers:
        pairs = zip(lists[name], lists["flat"], strict=True)
        found = np.mean([len(set(a) & set(b)) / ivf.nprobe for a, b in pairs])
        result["quantizers"][name] = {
            **{f"{part}_p50_ms": round(float(np.median(t)), 4) for part, t in times[name].items()},
            "lists_found": round(float(found), 4),
            "recall_at_10_vs_flat": round(neighbour_recall(answers[name], answers["flat"]), 4),
        }
        print(name, result["quantizers"][name])
    return publish(result, args.json)


if __name__ == "__main__":
    main()
