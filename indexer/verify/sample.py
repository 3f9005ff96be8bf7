"""The source-cache sample of `strata index verify`: rows recomputed from the cache they came
from and compared with what the version stores.

For a seeded sample of rows (of the added cache's rows, from `source.cache_first_row` on, for a
version made by `strata index add`): each stored prefix vector against p_L recomputed from the
cache row (read back with `reconstruct` where the index stores vectors exactly, else found by
searching for it), the row's id, and its k concepts in the postings with the recomputed
activations (within float16's rounding, which a version stores them in). Skipped, with a note,
when the version's rows map to no single cache (a delete), or the cache is gone or changed since
the build.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from indexer.format.ids import IDS
from indexer.format.manifest import BundleManifest
from indexer.format.postings import ROWS, VALUE_ATOL, VALUE_RTOL, VALUES, Postings
from indexer.format.served_index import ServedIndex
from indexer.format.store import TOLERANCE
from indexer.verify.faults import VECTOR_TOLERANCE, Fault, VerifyReport
from training.cedar.concepts import ConceptCoder
from training.core.artifacts import TransformArtifact
from training.core.cache import MANIFEST as CACHE_MANIFEST
from training.core.cache import EmbeddingCache
from training.core.errors import InputError
from training.core.files import sha256_file
from training.core.metrics import prefix_vectors

SEARCH_DEPTH = 10  # hits searched for a row's own vector in an index that stores no vectors


def check_sample(
    path: Path,
    manifest: BundleManifest,
    indexes: dict[int, ServedIndex],
    artifacts: dict[str, TransformArtifact],
    postings_ok: bool,
    cache_dir: Path | None,
    sample: int,
    seed: int,
    report: VerifyReport,
) -> None:
    """Recompute a sample of rows from the source cache and compare with what is stored."""
    if cache_dir is None and not manifest.source.get("cache"):
        operation = manifest.source.get("operation", "build")
        report.notes.append(
            f"sample check skipped: the version's rows map to no single cache ({operation})"
        )
        return
    cache_dir = Path(cache_dir or manifest.source["cache"])
    try:
        cache = EmbeddingCache.open(cache_dir)
    except InputError as exc:
        report.notes.append(f"sample check skipped: {exc}")
        return
    recorded = manifest.source.get("cache_manifest_sha256")
    current = (
        sha256_file(cache.root / CACHE_MANIFEST)
        if (cache.root / CACHE_MANIFEST).is_file()
        else None
    )
    first = int(manifest.source.get("cache_first_row", 0))
    if recorded != current or first + cache.rows != manifest.rows:
        report.notes.append(f"sample check skipped: the cache {cache_dir} changed since the build")
        return
    rows = first + np.sort(
        np.random.default_rng(seed).choice(cache.rows, min(sample, cache.rows), replace=False)
    )
    x, cache_ids = read_cache_rows(cache, manifest.modality, rows - first)
    report.sampled_rows = len(rows)
    rotated = artifacts["grasp"].apply(x)
    faults = report.faults
    for entry in manifest.prefixes:
        index = indexes.get(entry.length)
        if index is None:
            continue
        expected = prefix_vectors(rotated, entry.length)
        storage = index.exact
        if storage is not None:
            stored = np.stack([storage.reconstruct(int(r)) for r in rows])
            error = np.abs(stored - expected).max(axis=1)
            # a head of the shared store differs by its codes' rounding (indexer/format/store/)
            shared = entry.store or entry.rerank
            tolerance = TOLERANCE[manifest.store["dtype"]] if shared else VECTOR_TOLERANCE
            bad = error > tolerance
            for row, err in zip(rows[bad], error[bad], strict=True):
                faults.append(
                    Fault(
                        "sample", f"{entry.file}: row {row} differs from the cache's by {err:.3g}"
                    )
                )
        else:
            _, found = index.search(expected, SEARCH_DEPTH, index.widest())
            for row, hits in zip(rows, found, strict=True):
                if row not in hits:
                    faults.append(
                        Fault("sample", f"{entry.file}: searching row {row}'s own vector misses it")
                    )
    bundle_ids = pq.read_table(path / IDS, columns=["id"]).column("id").take(rows).to_pylist()
    for row, ours, theirs in zip(rows, bundle_ids, cache_ids, strict=True):
        if ours != theirs:
            faults.append(
                Fault("sample", f"{IDS}: row {row} has id {ours!r}, the cache has {theirs!r}")
            )
    if postings_ok and not any(f.startswith("postings_") for f in faults):
        check_sample_postings(path, ConceptCoder(artifacts["cedar"]), x, rows, faults)


def activation_tolerance(value: float) -> float:
    """How far a stored activation may lie from the recomputed `value`: the recomputation's
    error and float16's rounding."""
    return VECTOR_TOLERANCE + VALUE_ATOL + VALUE_RTOL * abs(float(value))


def check_sample_postings(
    path: Path, coder: ConceptCoder, x: np.ndarray, rows: np.ndarray, faults: list[str]
) -> None:
    postings = Postings(path)
    concepts, activations = coder.encode(x)
    for row, row_concepts, row_values in zip(rows, concepts, activations, strict=True):
        for concept, value in zip(row_concepts, row_values, strict=True):
            posted_rows, posted_values = postings.get(int(concept))
            at = np.searchsorted(posted_rows, row)
            if at >= len(posted_rows) or posted_rows[at] != row:
                faults.append(Fault("sample", f"{ROWS}: row {row} missing from concept {concept}"))
            elif abs(float(posted_values[at]) - float(value)) > activation_tolerance(value):
                faults.append(Fault("sample", f"{VALUES}: row {row}, concept {concept} differs"))


def read_cache_rows(
    cache: EmbeddingCache, modality: str, rows: np.ndarray
) -> tuple[np.ndarray, list[str]]:
    """float32 embeddings and ids of sorted row positions, reading only the shards they fall in."""
    x = np.empty((len(rows), cache.dim), dtype=np.float32)
    ids: list[str] = []
    start = 0
    for shard in cache.manifest.shards:
        stop = start + shard.rows
        lo, hi = np.searchsorted(rows, [start, stop])
        if hi > lo:
            data = cache.read_shard(shard)
            local = rows[lo:hi] - start
            x[lo:hi] = np.asarray(data.embeddings[modality][local], dtype=np.float32)
            ids.extend(data.metadata.column("id").take(local).to_pylist())
        start = stop
    return x, ids
