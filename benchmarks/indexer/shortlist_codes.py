"""Which compressed codes the shortest prefix keeps as the shortlist of a bundle with a store:
bytes per row, recall@10 at every granularity and p50, each candidate reranked exactly from the
same int8 store, in one run.

N × D spectrum rows (ann_tuning.spectrum_rows), float16-rounded as a cache holds them; the int8
store's codes and head norms (indexer/format/store/). For each candidate FAISS factory over
p_S (S = D/16), each of its search settings and each rerank factor F_S:

- object (L = S): the codes' k·F_S best, reranked by the store's s_S;
- every longer L: the funnel, the codes' k·F best reranked by the store's s_L, F the smallest of
  10, 20, 50, 100 reaching recall@10 0.95;

recall@10 against exact float32 search at L on held-out gallery rows (leave one out); p50 of the
whole search, one thread. The plan's choice (indexer/format/index_plan.py SHORTLIST_RULE) is
the fewest bytes whose every granularity reaches 0.95 at its cheapest setting.

    python -m benchmarks.indexer.shortlist_codes --rows 1000000
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

from benchmarks.harness import benchmark_parser, publish
from benchmarks.indexer.ann_tuning import spectrum_rows
from indexer.format.index_plan import ivf_lists
from indexer.format.store import encode_rows, head_norms
from indexer.format.tuning import drop_self
from training.core.metrics import neighbour_recall, prefix_vectors

K, FACTORS, TARGET = 10, (10, 20, 50, 100), 0.95
CANDIDATES = ("IVF{nlist},SQ8", "IVF{nlist},SQ4", "IVF{nlist},PQ{half}x4fs", "HNSW32,SQ8")
SETTINGS = {"IVF": ("nprobe=8", "nprobe=16", "nprobe=32"), "HNSW": ("efSearch=32", "efSearch=64")}
RERANK_FACTORS = (4, 10, 20)


def codes_bytes(index: faiss.Index, rows: int) -> float:
    with tempfile.NamedTemporaryFile() as file:
        faiss.write_index(index, file.name)
        return round(Path(file.name).stat().st_size / rows, 1)


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/shortlist_codes.json"))
    args = parser.parse_args(argv)
    n, dim, short = args.rows, args.dim, args.dim // 16
    lengths = [dim // 16, dim // 8, dim // 4, dim // 2, dim]
    x = spectrum_rows(n, dim, 1024, 1.0, seed=0).astype(np.float16).astype(np.float32)
    codes = encode_rows(x, "int8")
    norms = head_norms(codes, lengths)
    selves = np.sort(np.random.default_rng(7).choice(n, args.queries, replace=False))
    truth = {}
    for length in lengths:
        gallery = np.ascontiguousarray(prefix_vectors(x, length))
        flat = faiss.IndexFlatIP(length)
        flat.add(gallery)
        truth[length] = drop_self(flat.search(gallery[selves], K + 1)[1], selves, K)
        del flat, gallery
    heads = np.ascontiguousarray(prefix_vectors(x, short))
    threads = faiss.omp_get_max_threads()

    def rerank(query: np.ndarray, candidates: np.ndarray, length: int) -> np.ndarray:
        rows = candidates[candidates >= 0]
        scores = (codes[rows, :length].astype(np.float32) @ query) / norms[
            rows, lengths.index(length)
        ]
        return rows[np.lexsort((rows, -scores))][: K + 1]

    result: dict = {"rows": n, "dim": dim, "shortlist_prefix": short, "candidates": []}
    for template in CANDIDATES:
        factory = template.format(nlist=ivf_lists(n), half=short // 2)
        started = time.perf_counter()
        index = faiss.index_factory(short, factory, faiss.METRIC_INNER_PRODUCT)
        if not index.is_trained:
            pick = np.random.default_rng(0).choice(n, min(n, 200_000), replace=False)
            index.train(heads[np.sort(pick)])
        index.add(heads)
        build = round(time.perf_counter() - started, 1)
        faiss.omp_set_num_threads(1)
        candidate = {"factory": factory, "bytes_per_row": codes_bytes(index, n), "build_s": build}
        candidate["settings"] = []
        for setting in SETTINGS[factory[:4].rstrip("0123456789{")]:
            faiss.ParameterSpace().set_index_parameters(index, setting)
            for rerank_factor in RERANK_FACTORS:
                point: dict = {"search": setting, "object_factor": rerank_factor}
                for length in lengths:
                    factors = (rerank_factor,) if length == short else FACTORS
                    for factor in factors:
                        times, found = [], []
                        for row in selves:
                            query = (
                                x[row] if length == dim else prefix_vectors(x[row][None], length)[0]
                            )
                            tick = time.perf_counter()
                            _, candidates = index.search(heads[row][None], (K + 1) * factor)
                            found.append(rerank(query, candidates[0], length))
                            times.append(time.perf_counter() - tick)
                        recall = neighbour_recall(
                            drop_self(np.stack(found), selves, K), truth[length]
                        )
                        if recall >= TARGET or factor == factors[-1]:
                            break
                    point[str(length)] = {
                        "factor": factor,
                        "recall_at_10": round(float(recall), 4),
                        "p50_ms": round(float(np.median(times)) * 1e3, 3),
                    }
                candidate["settings"].append(point)
                print(factory, point, flush=True)
        faiss.omp_set_num_threads(threads)
        result["candidates"].append(candidate)
        publish(result, args.json)
    return publish(result, args.json)


if __name__ == "__main__":
    main()
