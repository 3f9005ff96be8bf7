"""The index kinds Milvus offers for the shortlist codes, measured on a Milvus engine.

--rows spectrum rows × --dim (α = 1, the rows `python -m benchmarks.service.milvus` serves), one
collection a kind, flushed before its index is built (a server searches a growing segment
without it); --queries held-out rows searched, recall@10 against exact search and ms a query
(all queries in one call):

- a narrow setting of each kind (nprobe 4 of 128 lists, ef 16; IVF_PQ with a code of dim/8
  bytes): an engine that builds the index it is given loses recall there, one that scans every
  row whatever the kind says (Milvus Lite: recall 1.000 for every kind) cannot tell the kinds
  apart;
- the shortlist codes' candidates at the settings an export would use: HNSW as exported
  (indexer/milvus/export.index_params_for), HNSW_SQ (SQ8 codes in the same graph) at those
  settings, and IVF_SQ8 at the local rule's nlist
  (indexer/format/index_plan.ivf_lists) and nprobe 8 (the local codes' setting, which reranks
  from the store) to 128. Run it with --dim 32, the shortest prefix of a 512-d bundle, the one
  the codes index.

A kind the engine's release lacks is recorded as refused. Milvus Lite unless --to names a
server (`milvus://host:19530`).

    python -m benchmarks.service.milvus.kinds
    python -m benchmarks.service.milvus.kinds --rows 200000 --dim 32 --queries 200 \
        --to milvus://127.0.0.1:19530
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from pymilvus import DataType, MilvusException

from benchmarks.harness import benchmark_parser, publish
from benchmarks.service.milvus import milvus_target
from indexer.format.index_plan import ivf_lists
from indexer.milvus.store import MilvusStore
from training.synthetic import spectrum_rows

NARROW = (  # a narrow setting: an engine that builds the index it is given loses recall here
    ("FLAT", {}, {}),
    ("HNSW", {"M": 16, "efConstruction": 64}, {"ef": 16}),
    ("IVF_SQ8", {"nlist": 128}, {"nprobe": 4}),
    ("IVF_RABITQ", {"nlist": 128}, {"nprobe": 4}),
    ("HNSW_SQ", {"M": 16, "efConstruction": 64, "sq_type": "SQ8"}, {"ef": 16}),
)


def kinds(rows: int, dim: int) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(label, kind, build, search): the narrow settings (IVF_PQ with a code a dim/8 bytes),
    then the shortlist codes' candidates as an export would build them over `rows` rows: HNSW
    as exported (M 32, efConstruction 200, ef 64), HNSW_SQ at those settings, and IVF_SQ8 at
    the local rule's nlist,
    nprobe 8 (the local codes' tuned setting, which reranks from the store) to 128."""
    lists = ivf_lists(rows)
    pq = ("IVF_PQ", {"nlist": 128, "m": max(1, dim // 8), "nbits": 8}, {"nprobe": 4})
    return [
        *((f"{kind} narrow", kind, build, search) for kind, build, search in (*NARROW, pq)),
        ("HNSW as exported", "HNSW", {"M": 32, "efConstruction": 200}, {"ef": 64}),
        (
            "HNSW_SQ (SQ8) at the export's settings",
            "HNSW_SQ",
            {"M": 32, "efConstruction": 200, "sq_type": "SQ8"},
            {"ef": 64},
        ),
        *(
            (f"IVF_SQ8 nlist {lists} nprobe {n}", "IVF_SQ8", {"nlist": lists}, {"nprobe": n})
            for n in (8, 32, 128)
        ),
    ]


def kinds_part(args: Any, work: Path) -> dict[str, Any]:
    """Recall@10 and ms a query of each index kind and setting of `kinds` (module doc)."""
    rows = spectrum_rows(args.rows + args.queries, args.dim, 1.0, seed=0)
    gallery, queries = rows[: args.rows], rows[args.rows :]
    truth = np.argsort(-(queries @ gallery.T), axis=1)[:, :10]
    result: dict[str, Any] = {"rows": args.rows, "dim": args.dim, "kinds": {}}
    with milvus_target(args.to, work / "kinds.db") as target:
        store = MilvusStore(target, timeout_s=3600)
        client = store.client
        for label, kind, build, search in kinds(len(gallery), args.dim):
            name = f"bench_kind_{kind.lower()}"
            if client.has_collection(name):
                client.drop_collection(name)
            schema = client.create_schema(auto_id=False)
            schema.add_field("id", DataType.INT64, is_primary=True)
            schema.add_field("v", DataType.FLOAT_VECTOR, dim=args.dim)
            client.create_collection(name, schema=schema)
            for start in range(0, len(gallery), 5000):
                part = gallery[start : start + 5000]
                client.insert(
                    name, [{"id": start + i, "v": v} for i, v in enumerate(part.tolist())]
                )
            client.flush(name)  # sealed: a growing segment is searched without the index
            index = client.prepare_index_params()
            index.add_index("v", index_type=kind, metric_type="IP", params=build)
            try:
                client.create_index(name, index)
            except MilvusException as exc:  # a kind this engine's release lacks
                result["kinds"][label] = {"refused": str(exc.message)}
                client.drop_collection(name)
                continue
            client.load_collection(name)
            started = time.perf_counter()
            found = client.search(
                name, queries.tolist(), limit=10, anns_field="v", search_params={"params": search}
            )
            ms = (time.perf_counter() - started) * 1e3 / len(queries)
            recall = np.mean(
                [
                    len({h["id"] for h in hits} & set(truth[q].tolist())) / 10
                    for q, hits in enumerate(found)
                ]
            )
            result["kinds"][label] = {
                "recall@10": round(float(recall), 4),
                "ms_per_query": round(ms, 2),
            }
            client.drop_collection(name)
        store.close()
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--to", default=None, help="a Milvus server instead of Milvus Lite")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/milvus-kinds.json"))
    args = parser.parse_args(argv)
    Path("runs").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir="runs") as work:
        result = kinds_part(args, Path(work))
    return publish(result, args.json)


if __name__ == "__main__":
    main()
