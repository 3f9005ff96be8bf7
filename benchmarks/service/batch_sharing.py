"""What a query costs alone and in a batch of its own kind: why two workers can serve a mix
of texts more slowly than one.

On request_path's bundle (N × 512 synthetic rows, a random-weight open_clip ViT-B-32; built
once into `--work`), each of the load generator's ten AUTO texts (benchmarks/service/load.py's
QUERIES) is searched through `SearchEngine.search_batch` alone and in batches of the same text
(`--sizes`), one FAISS and one torch thread (a served worker's), every text a query-cache hit;
then the ten in one batch, and the ten each three times in one batch. Printed: each text's
route, prefix and plan, and its ms per query at each batch size.

A direct scan reads every row for one query or for many (FAISS's Flat search blocks the
queries), so a text whose route scans directly costs far less per query in a batch than alone.
The server's micro-batcher gathers the queries waiting in one process; with two workers each
gathers half as many, and such a text shares fewer scans (docs/explanation/serving.md).

    python -m benchmarks.service.batch_sharing
    python -m benchmarks.service.batch_sharing --rows 20000 --json /tmp/batch_sharing.json
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness import benchmark_parser, publish
from benchmarks.service.load import QUERIES
from benchmarks.service.request_path import ENCODER, gallery
from indexer.format.bundle import Bundle
from service.engine.compute_threads import limit_threads
from service.engine.search import SearchEngine
from service.query.cache import QueryCache
from service.results import SearchQuery
from training.core.encoders import load_encoder

K = 10


def per_query_ms(engine: SearchEngine, batch: Sequence[SearchQuery], repeats: int) -> float:
    """Mean ms per query over `repeats` calls of search_batch on `batch`, after a warm call."""
    engine.search_batch(batch)
    started = time.perf_counter()
    for _ in range(repeats):
        engine.search_batch(batch)
    return (time.perf_counter() - started) / repeats / len(batch) * 1e3


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--work", type=Path, default=Path("runs/bench/request-path"))
    parser.add_argument("--sizes", default="1,4,16", help="batch sizes, comma list")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/batch_sharing.json"))
    args = parser.parse_args()
    limit_threads(1)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    bundles = gallery(args.work, args.rows)
    encoder = load_encoder(ENCODER, device="cpu")
    engine = SearchEngine(Bundle.open(bundles), encoder, cache=QueryCache())
    queries = [SearchQuery.of(text, k=K) for text in QUERIES]
    texts = {}
    for query in queries:
        result = engine.search(query)  # its embedding now in the query cache
        texts[query.text] = {
            "route": result.granularity.value,
            "prefix": result.prefix_length,
            "plan": result.plan.kind if result.plan is not None else None,
            "ms_per_query": {
                str(n): round(per_query_ms(engine, [query] * n, args.repeats), 3) for n in sizes
            },
        }
    publish(
        {
            "benchmark": "batch_sharing",
            "rows": args.rows,
            "threads": 1,
            "texts": texts,
            "ten_in_one_batch_ms_per_query": round(per_query_ms(engine, queries, args.repeats), 3),
            "ten_three_times_in_one_batch_ms_per_query": round(
                per_query_ms(engine, queries * 3, args.repeats), 3
            ),
        },
        args.json,
    )


if __name__ == "__main__":
    main()
