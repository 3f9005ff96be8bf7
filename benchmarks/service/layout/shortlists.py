"""Which shortlist makes a funnel fastest at equal recall: the measurements a layout rule for the
long granularities would come from, beside hnswlib.

The default bundle (`strata index build`, no flags) over N × D spectrum rows
(benchmarks.service.layout.memory's inputs) is built once. For targets L = 2S and L = D, every
shortlist index at the shortest prefix S (32 at D = 512) is tried with every probe breadth and
factor F; each query's k·F shortlist is reranked exactly at L from the bundle's store, as the
service's funnel does (indexer/format/funnel.py). Shortlists:

- the bundle's own (IVF-SQ8 codes, `nprobe`);
- IVF with 4-bit fast-scan PQ codes of p_S (`IVF{lists},PQ{S/2}x4fs` and `PQ{S}x4fs`);
- an HNSW graph over p_S (M 16, ef_construction 100; `efSearch`).

Each arm: recall@10 against exact search at L (leave one out) and p50 of the whole funnel (one
thread), beside hnswlib over the full rows (M 32, ef_construction 200) at each ef from k + 1, and
a direct scan of the store at L. Interleaved, one run.

    python -m benchmarks.service.layout.shortlists --rows 100000
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np

from benchmarks.harness import benchmark_parser, publish
from benchmarks.indexer.ann_tuning import interleaved_ms
from benchmarks.indexer.peers import hnswlib_index, hnswlib_search
from benchmarks.service.layout.memory import PEER_EF, build, exact_truth, write_inputs
from indexer.format.funnel import rerank
from indexer.format.tuning import drop_self
from service.engine.plans import Planner
from training.core.metrics import neighbour_recall, prefix_vectors

K = 10
FACTORS = (5, 10, 20)


def shortlist_indexes(heads: np.ndarray, lists: int) -> dict[str, tuple[faiss.Index, str, list]]:
    """The candidate shortlist indexes over p_S rows: (index, parameter, its ladder)."""
    s = heads.shape[1]
    out: dict[str, tuple[faiss.Index, str, list]] = {}
    for factory in (f"IVF{lists},PQ{s // 2}x4fs", f"IVF{lists},PQ{s}x4fs"):
        index = faiss.index_factory(s, factory, faiss.METRIC_INNER_PRODUCT)
        index.train(heads)
        index.add(heads)
        out[factory] = (index, "nprobe", [8, 16, 32, 64])
    graph = faiss.IndexHNSWFlat(s, 16, faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = 100
    graph.add(heads)
    out["HNSW16 over p_S"] = (graph, "efSearch", [64, 128, 256])
    return out


def parameters(name: str, value: int) -> faiss.SearchParameters:
    if name == "nprobe":
        return faiss.SearchParametersIVF(nprobe=value)
    return faiss.SearchParametersHNSW(efSearch=value)


def funnel(
    index: faiss.Index, params: faiss.SearchParameters, exact, s: int, length: int, factor: int
) -> Callable[[np.ndarray], np.ndarray]:
    """One query's funnel: the shortlist of k·F rows at S, reranked exactly at L."""

    def search(query: np.ndarray) -> np.ndarray:
        head = prefix_vectors(query[None, :], s)
        _, candidates = index.search(head, (K + 1) * factor, params=params)
        return rerank(exact, query, candidates[0], length, K + 1)[1][0]

    return search


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/shortlists.json"))
    args = parser.parse_args(argv)
    faiss.omp_set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="shortlists-"))
    try:
        _, x = write_inputs(work, args.rows, args.dim, 1.0)
        bundle = build(work, "default")
        planner = Planner(bundle)
        s = min(bundle.prefix_lengths)
        selves = np.sort(np.random.default_rng(7).choice(len(x), args.queries, replace=False))
        rotated = bundle.rotate(x[selves])
        heads = np.ascontiguousarray(prefix_vectors(x, s))
        lists = bundle.index(s).shortlist.ivf.nlist
        candidates = {
            "bundle's codes (IVF-SQ8)": (planner.shortlists[s].faiss, "nprobe", [8, 16, 32, 64])
        }
        candidates |= shortlist_indexes(heads, lists)
        peer, _ = hnswlib_index(x, threads=1)
        result: dict = {"rows": args.rows, "dim": args.dim, "shortlist_prefix": s, "targets": {}}
        for length in (2 * s, args.dim):
            truth = exact_truth(x, selves, length)
            exact = planner.exact(length)
            arms: dict[str, Callable] = {}
            recalls: dict[str, float] = {}
            for name, (index, knob, ladder) in candidates.items():
                for value in ladder:
                    for factor in FACTORS:
                        arm = f"{name}, {knob} {value}, F {factor}"
                        search = funnel(index, parameters(knob, value), exact, s, length, factor)
                        arms[arm] = search
            if length == args.dim:
                peer_at, where = peer, "the full rows"
            else:  # the strongest peer at a shorter L: a graph over that prefix's own rows
                peer_at, _ = hnswlib_index(np.ascontiguousarray(prefix_vectors(x, length)), 1)
                where = f"p_{length}"
            for ef in PEER_EF[:8]:
                at_ef = hnswlib_search(peer_at, ef, K + 1)
                arms[f"hnswlib over {where}, ef {ef}"] = lambda q, f=at_ef, n=length: f(
                    prefix_vectors(q[None, :], n)[0]
                )
            arms["store scan at L"] = lambda q, n=length: bundle.search_prefix(
                n, q[None, :], K + 1
            )[1][0]
            for arm, search in arms.items():
                found = np.stack([search(q) for q in rotated])
                recalls[arm] = round(neighbour_recall(drop_self(found, selves, K), truth), 4)
            started = time.perf_counter()
            ms = interleaved_ms(arms, rotated, args.rounds)
            result["targets"][str(length)] = {
                arm: {"recall_at_10": recalls[arm], "p50_ms": ms[arm]} for arm in arms
            }
            result["targets"][str(length)]["seconds"] = round(time.perf_counter() - started, 1)
            publish(result, args.json)
        return publish(result, args.json)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
