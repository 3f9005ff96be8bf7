"""Concept-filtered search against unfiltered search, side by side: the p50 ratio.

The bundle: a captioned cache (default Flickr8k's 40,460 MiniLM captions, `runs/flickr-minilm`)
indexed with a GraSP-VL artifact (`--grasp`; default an identity one) and a CEDAR artifact that
has a vocabulary readout (default `runs/cedar-flickr`, from `strata train cedar`), so the filter
reads real word postings. Queries are `--queries` cache rows (seeded), sent as vectors through
`SearchEngine.search` at the full granularity (or `--granularity`), k = 10, one FAISS and one
torch thread, as each worker of `strata serve` on two cores.
For every word of `--words` (default: the readout's words at the 10th, 50th and 90th
percentile of frequency among those with their own threshold, and the most frequent), each
query is timed unfiltered, with `require` the word and with `exclude` it, interleaved query by
query so that the machine's drift hits all three alike. Prints and writes p50 per arm and the
ratios to the unfiltered p50.
Two more arms, `require_cold` and `exclude_cold`, run the same filters after dropping the
bundle's kept concept bitmaps (indexer/format/row_bitmaps.py) and the engine's filter blocks
(service/engine/filter_blocks.py), so each builds its own from the postings: the cost of a
filter no query has used before; the kept ones are back after each cold search, so the warm
arms stay warm. `recall@10`: each warm arm's mean
recall@10 against an exact search of the same rows at the queries' prefix (every allowed row
scored), the unfiltered arm's included for reference.
`--phrases` (comma list) times words and phrases the catalog lacks, as zero-shot concepts
(service/engine/open_vocabulary.py; the engine then loads the cache's encoder): the bundle's
one-off state, timed apart (`prepare`: the readout's words embedded, the moments, z and every
row's hub value; `sketch`: past 131,072 rows, the sketch, which the first phrase starts on a
background thread when served; both only read where the version keeps them, measured by the
index build: `kept_by_the_version`, the manifest's record with its seconds), each phrase's
first use (embedded, its cut, its rows by a scan or the sketch's search, kept), whether a
scan or a search found them and the search's recall against a scan at the same cut, and then,
query by query, unfiltered against `require` the phrase, warm: the p50 ratio (with
`--phrases` and no `--words`, the phrases alone).
`--rows N` above the cache's size indexes N rows tiled from it instead (real rows plus a little
noise: training.synthetic.write_tiled_cache), so the postings keep their real density.

    python -m benchmarks.service.filters.filter_latency
    python -m benchmarks.service.filters.filter_latency --cache runs/flickr-minilm \
        --cedar runs/cedar-flickr
    python -m benchmarks.service.filters.filter_latency --rows 1000000 --queries 100
    python -m benchmarks.service.filters.filter_latency --phrases giraffe,"fire hydrant",sink
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.format.bundle import Bundle
from indexer.format.funnel import exact_rows_for
from service.engine.compute_threads import limit_threads
from service.engine.filtering import allowed_rows
from service.engine.search import SearchEngine
from service.results import ConceptRef, SearchQuery, SearchResult
from training.core.artifacts import TransformArtifact
from training.core.cache import EmbeddingCache
from training.core.encoders import load_encoder
from training.core.errors import InputError
from training.core.metrics import prefix_vectors
from training.synthetic import write_tiled_cache


def word_bundle(
    cache: Path,
    cedar: Path,
    work: Path,
    rows: int = 0,
    index_types: tuple[str, ...] = (),
    grasp: Path | None = None,
) -> Path:
    """BUNDLES folder over `cache` (the given GraSP-VL artifact, else an identity one; the given
    CEDAR); built once in `work`. With `rows` above the cache's size, over that many rows tiled
    from it (module doc); `index_types`: the build's PREFIX=FACTORY overrides."""
    out = work / "bundles"
    if (out / "CURRENT").exists():
        return out
    x = EmbeddingCache.open(cache).embeddings("text")
    if rows > len(x):
        encoder = EmbeddingCache.open(cache).manifest.encoder
        cache = write_tiled_cache(x, work / "tiled-cache", rows, encoder)
    if grasp is None:
        grasp = work / "grasp"
        TransformArtifact.identity(x.shape[1], method="grasp-vl").save(grasp, overwrite=True)
    config = BuildConfig(cache=cache, grasp=grasp, cedar=cedar, out=out, index_types=index_types)
    build_bundle(config)
    return out


ARMS = (
    ("unfiltered", ""),
    ("require", "require"),
    ("exclude", "exclude"),
    ("require_cold", "require"),
    ("exclude_cold", "exclude"),
)
CHUNK = 100_000  # rows scored at once by the exact reference


def exact_filtered_rows(
    engine: SearchEngine, vector: np.ndarray, word: str, role: str, length: int
) -> set:
    """The exact filtered top 10 at prefix `length`: every allowed row scored, chunk by chunk,
    from the bundle's exact rows at the smallest prefix ≥ `length` that keeps them (cut to
    `length`: an IVF prefix keeps none of its own)."""
    bundle = engine.bundle
    refs = [ConceptRef(name=word)]
    allowed = allowed_rows(
        bundle, refs if role == "require" else [], refs if role == "exclude" else []
    )
    query = prefix_vectors(bundle.rotate(vector[None, :] / np.linalg.norm(vector)), length)[0]
    exact = exact_rows_for({n: bundle.index(n) for n in bundle.prefix_lengths}, length)
    if exact is None:
        raise InputError(f"the bundle keeps no exact rows at prefix ≥ {length}: no reference")
    rows = allowed.materialise()
    scores = np.concatenate(
        [exact.prefix_rows(rows[s : s + CHUNK], length) @ query for s in range(0, len(rows), CHUNK)]
        or [np.zeros(0, np.float32)]
    )
    return set(rows[np.lexsort((rows, -scores))[:10]].tolist())


@contextmanager
def cold(engine: SearchEngine) -> Iterator[None]:
    """A search as a filter's first: the bundle's concept bitmaps and the engine's filter
    blocks empty inside, the warm ones back after (so the warm arms stay warm)."""
    blocks = getattr(engine.scorer, "blocks", None)
    with engine.bundle.concept_bitmaps.cold(), blocks.cold() if blocks else nullcontext():
        yield


def chosen_words(engine: SearchEngine) -> list[str]:
    readout = engine.coder.readout
    if readout is None:
        raise InputError("the CEDAR artifact has no vocabulary readout: no word concepts")
    own = [i for i in range(len(readout.words)) if readout.own_threshold[i]]
    freq = np.array([(readout.frequency or [0.0] * len(readout.words))[i] for i in own])
    order = np.argsort(freq)
    picks = [order[int(q * (len(order) - 1))] for q in (0.1, 0.5, 0.9, 1.0)]
    return [readout.words[own[p]] for p in dict.fromkeys(picks)]


def phrase_latency(
    engine: SearchEngine,
    phrases: list[str],
    x: np.ndarray,
    rows: np.ndarray,
    granularity: str,
) -> dict:
    """The zero-shot arms of `--phrases` (module doc), in ms."""
    vocabulary = engine.vocabulary
    if vocabulary is None:
        raise InputError("no open vocabulary: the bundle's CEDAR artifact has no readout")
    # what the index build measured and kept (indexer/vocabulary/stored_state.py), if anything:
    # then `prepare` and `sketch` only read it
    out: dict = {"kept_by_the_version": engine.bundle.manifest.open_vocabulary}
    vocabulary.embed(["a photo"])  # the encoder's own first call (torch's set-up) timed apart
    started = time.perf_counter()
    vocabulary.prepare()
    out["moments_z_and_hubs_ms"] = round((time.perf_counter() - started) * 1e3, 1)
    started = time.perf_counter()
    vocabulary.sketch()
    out["sketch_ms"] = round((time.perf_counter() - started) * 1e3, 1)
    for phrase in phrases:
        started = time.perf_counter()
        made = vocabulary.concept(phrase)
        first = (time.perf_counter() - started) * 1e3
        started = time.perf_counter()
        direction = vocabulary.directions(vocabulary.embed([phrase]))[0]
        embed = (time.perf_counter() - started) * 1e3  # the encoder's share, timed again
        scanned = np.flatnonzero(vocabulary.corrected_scores(direction) >= made.cut)
        found = made.rows.materialise()
        times: dict[str, list[float]] = {"unfiltered": [], "require": []}
        for row in rows:
            vector = x[row].astype(np.float32)
            for arm in times:
                extra = {"require": [phrase]} if arm == "require" else {}
                query = SearchQuery.of(vector=vector, granularity=granularity, k=10, **extra)
                started = time.perf_counter()
                engine.search(query)
                times[arm].append(time.perf_counter() - started)
        p50 = {arm: float(np.median(t)) * 1e3 for arm, t in times.items()}
        out[phrase] = {
            "active_rows": made.rows.count,
            "found_by": made.found,
            # a scan that finds no row leaves the search nothing to miss: recall 1
            "recall_vs_scan": round(
                len(np.intersect1d(found, scanned)) / len(scanned) if len(scanned) else 1.0, 4
            ),
            "first_use_ms": round(first, 2),
            "of_which_embedding_ms": round(embed, 2),
            "p50_ms": {a: round(v, 3) for a, v in p50.items()},
            "require_ratio": round(p50["require"] / p50["unfiltered"], 3),
        }
    return out


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, default=Path("runs/flickr-minilm"))
    parser.add_argument("--cedar", type=Path, default=Path("runs/cedar-flickr"))
    parser.add_argument(
        "--grasp", type=Path, default=None, help="GraSP-VL artifact (default: an identity one)"
    )
    parser.add_argument("--work", type=Path, default=Path("runs/bench/filter-latency"))
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rows", type=int, default=0, help="tile the cache to this many rows")
    parser.add_argument("--words", default="", help="comma list (default: chosen by frequency)")
    parser.add_argument(
        "--index-type", action="append", default=[], help="PREFIX=FACTORY, as `strata index build`"
    )
    parser.add_argument("--granularity", default="full", help="the queries' granularity")
    parser.add_argument("--phrases", default="", help="comma list of zero-shot words/phrases")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/filter_latency.json"))
    args = parser.parse_args()
    limit_threads(1)  # as a served worker's (service/cli/pool/worker.py): FAISS and torch
    phrases = [p for p in args.phrases.split(",") if p]
    encoder = (
        load_encoder(str(EmbeddingCache.open(args.cache).manifest.encoder), device="cpu")
        if phrases
        else None
    )
    engine = SearchEngine(
        Bundle.open(
            word_bundle(
                args.cache, args.cedar, args.work, args.rows, tuple(args.index_type), args.grasp
            )
        ),
        encoder,
    )
    words = [w for w in args.words.split(",") if w] or ([] if phrases else chosen_words(engine))
    x = EmbeddingCache.open(args.cache).embeddings("text")
    rows = np.random.default_rng(args.seed).choice(len(x), args.queries, replace=False)
    result: dict = {"rows": engine.bundle.rows, "queries": args.queries, "k": 10, "words": {}}
    for word in words:
        [concept] = engine.coder.resolve(word)
        active = len(engine.bundle.postings(concept)[0])
        times: dict[str, list[float]] = {arm: [] for arm, _ in ARMS}
        recall: dict[str, list[float]] = {"unfiltered": [], "require": [], "exclude": []}
        found: list[tuple[np.ndarray, str, SearchResult]] = []
        for row in rows:
            vector = x[row].astype(np.float32)
            for arm, role in ARMS:
                extra = {role: [word]} if role else {}
                query = SearchQuery.of(vector=vector, granularity=args.granularity, k=10, **extra)
                with cold(engine) if arm.endswith("_cold") else nullcontext():
                    started = time.perf_counter()
                    result_of = engine.search(query)
                    times[arm].append(time.perf_counter() - started)
                if arm in recall:
                    found.append((vector, arm, result_of))
        for vector, arm, result_of in found:  # after the timing: its scans would cool the caches
            truth = exact_filtered_rows(engine, vector, word, arm, result_of.prefix_length)
            hits = {hit.row for hit in result_of.hits}
            recall[arm].append(len(hits & truth) / max(1, len(truth)))
        p50 = {arm: float(np.median(t)) * 1e3 for arm, t in times.items()}
        result["words"][word] = {
            "active_rows": active,
            "p50_ms": {a: round(v, 3) for a, v in p50.items()},
            **{f"{a}_ratio": round(p50[a] / p50["unfiltered"], 3) for a, _ in ARMS[1:]},
            **{f"{a}_recall@10": round(float(np.mean(r)), 4) for a, r in recall.items()},
        }
    if phrases:
        result["zero_shot"] = phrase_latency(engine, phrases, x, rows, args.granularity)
    publish(result, args.json)


if __name__ == "__main__":
    main()
