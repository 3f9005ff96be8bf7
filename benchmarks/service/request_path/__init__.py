"""The path around the search: bare FAISS, `SearchEngine.search` and the real `strata serve`,
interleaved in one run, with one FAISS thread; served QPS at several concurrencies; and where
one served query's time goes, stage by stage.

The bundle: N × 512 synthetic clustered rows (default 100,000; training/synthetic.py)
in a float16 cache whose manifest names `open_clip:ViT-B-32@random:0` (a 512-d text tower with
random weights: no download), random GraSP-VL and CEDAR artifacts, every prefix Flat; built
once into `--work` and reused (so a before and an after run search the same rows).

1. Latency, single queries, k = 10, in four groups, the arms of each timed one after another
   for every query (`harness.interleaved_times`; a group's arms read the same index, so none
   runs on a CPU cache another group's larger scan has just flushed: the bare float32 scan at
   512 dims is a group of its own). object: the bundle's
   own FAISS Flat index at the object prefix (32 dims), searched directly with a prefix
   already cut and normalised; `SearchEngine.search` with a raw vector at object; the same
   through `strata serve` (a subprocess, OMP_NUM_THREADS=1) from one gRPC client in this
   process; and the floor of any Python gRPC server: a bare grpc.aio server in a process of
   its own that decodes the request and returns a canned 10-hit answer, and the same on
   grpc's thread-pool server (one worker), the other server Python's gRPC offers. bare full:
   the Flat index at 512. full: the engine and the server at full (plan auto: the funnel the engine
   calibrated). text: AUTO text queries in-process and served (after a warm round every text
   is a query-cache hit, so what is timed is the path, not the encoder). Ratios: in-process /
   bare at 32, served / in-process for each kind. What serving adds, for object, full and
   text: the median of the per-call differences served − in-process (each served call is
   the same query as the in-process call just before it: `harness.paired_median`), beside
   the difference of the two p50s, and the paired figure less the canned-answer server's p50 (the
   target's measure), that server interleaved with the object and with the text queries (sent
   the texts): a machine whose speed drifts between groups moves both alike. The full group has one
   more floor: the grpc.aio canned server answering after as long a busy wait on its event loop as
   an in-process full query takes (its p50, measured first), less that wait: what the transport
   costs when the client has waited that long (a thread woken after milliseconds asleep answers
   later than one woken at once). The text mix's costs fall in groups by the granularity AUTO
   picks, and its p50 lies between two of them, so the difference of the p50s moves by a
   group's width from run to run; the paired median does not.
2. QPS at each `--concurrency` (C coroutines over one channel in a separate process, the
   machinery of benchmarks/service/load.py), vector queries at object and AUTO text queries,
   the two kinds alternated, `--repeats` rounds; medians.
3. The profile of one served vector query (object) and one served text query: each stage of
   the server's path called alone on that query's own values, `--profile-calls` times, median
   µs — decode (the request's bytes to a message), conversion (message to SearchQuery), checks,
   routing, embedding (the vector normalised, or the text's cache look-up), rotation, search
   (FAISS and the plan), hits, the result, the response (message and bytes), the batcher
   (submit to result through an idle MicroBatcher, nothing computed: both queries are cheap,
   so a lone one runs on its event loop; beside it, not on their path, the hand-off to a
   lane's thread and back that a dearer query pays) and the metrics recorded per query; `rest`
   is what serving adds (the paired median of served − in-process) minus the stages outside
   the engine (decode, conversion, response, metrics, the batcher on the loop): gRPC's
   transport and interceptors, and the client.
4. The timeline of a served object and full query on a live server in this process (its engine
   and handler stamped, timeline.py): the way in, handler to engine, the engine, back to the
   handler's end, the way out; where a lane query's extra time goes.

    python -m benchmarks.service.request_path                      # 100,000 rows
    python -m benchmarks.service.request_path --rows 20000 --queries 100 --json /tmp/rp.json
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from service._generated.strata.v1 import search_pb2 as pb
from training.core.cache import EmbeddingCache
from training.synthetic import (
    cluster_centres,
    clustered_rows,
    random_cedar_artifact,
    random_grasp_artifact,
    write_synthetic_cache,
)

ENCODER = "open_clip:ViT-B-32@random:0"
DIM = 512
K = 10
TEXT = "a dog"  # the profiled text query (AUTO: object)
WAITING = "bare gRPC (canned answer after the in-process full's p50)"
CANNED = "bare gRPC (canned answer)"
CANNED_TEXTS = "bare gRPC (canned answer, sent the texts)"
CANNED_BESIDE = {  # each kind's canned-answer floor: object's and text's timed in their group
    "object": CANNED,
    "full": CANNED,  # the object group's; the full group times its own floor, WAITING
    "text": CANNED_TEXTS,
}
SERVED_PAIRS = {  # each kind's served arm and in-process arm
    "object": ("served object", "in-process object"),
    "full": ("served full (auto)", "in-process full (auto)"),
    "text": ("served text (auto)", "in-process text (auto)"),
}


def gallery(work: Path, rows: int) -> Path:
    """The BUNDLES folder of `rows` synthetic 512-d rows, built once (the package's docstring)."""
    out = work / f"bundles-{rows}"
    if (out / "CURRENT").exists():
        return out
    cache = write_synthetic_cache(work / f"cache-{rows}", rows, DIM, encoder=ENCODER)
    sample = np.asarray(EmbeddingCache.open(cache).embeddings("image")[:5000], dtype=np.float32)
    random_grasp_artifact(DIM).save(work / "grasp", overwrite=True)
    random_cedar_artifact(DIM, 32, sample).save(work / "cedar", overwrite=True)
    build_bundle(BuildConfig(cache=cache, grasp=work / "grasp", cedar=work / "cedar", out=out))
    return out


def query_vectors(count: int, seed: int = 7) -> np.ndarray:
    """Fresh rows of the gallery's distribution (another seed than the gallery's shards)."""
    rows, _ = clustered_rows(cluster_centres(64, DIM, 0), count, seed=seed)
    return rows


def vector_request(vector: np.ndarray, granularity: int) -> pb.SearchRequest:
    return pb.SearchRequest(
        query=pb.Query(vector=pb.FloatVector(values=vector.tolist())),
        granularity=granularity,
        top_k=K,
    )
