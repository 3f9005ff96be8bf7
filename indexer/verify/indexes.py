"""A version's prefix indexes as `strata index verify` checks them (the whole check:
indexer/verify/check.py): each index read back (ntotal, d, metric, its search setting), and the
cross-check that needs no cache — for a sample of rows, the vectors of every exactly stored
prefix are unit length and the renormalised head of the longest one (p_L = normalise(p_M[:L]))."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import faiss
import numpy as np

from indexer.format.manifest import BundleManifest, PrefixEntry
from indexer.format.prefix_index import read_prefix_index
from indexer.format.served_index import ServedIndex, mapped
from indexer.format.store import TOLERANCE, VectorStore
from indexer.format.store.faiss_view import StoreIndex
from indexer.format.store_rerank import StoreRerank
from indexer.verify.faults import VECTOR_TOLERANCE, Fault
from training.core.metrics import prefix_vectors


def check_indexes(
    path: Path,
    manifest: BundleManifest,
    intact: set[str],
    faults: list[str],
    store: VectorStore | None = None,
) -> dict[int, ServedIndex]:
    """Each prefix's own index read back and checked; codes reranked from the store come back
    wrapped in their rerank (`store`: the verified store, None when it is missing or damaged)."""
    opened: dict = {}
    for entry in manifest.prefixes:
        if entry.store:
            continue  # no file of its own: the store is checked by verify_store
        if entry.rerank and store is None:
            faults.append(Fault("manifest", f"{entry.file}: reranks from a missing store"))
            continue
        record = manifest.files.get(entry.file)
        if record is None:
            faults.append(Fault("manifest", f"{entry.file}: not listed in the manifest's files"))
            continue
        if record.rows != manifest.rows:
            faults.append(
                Fault(
                    "rows",
                    f"{entry.file}: manifest lists {record.rows} rows, bundle {manifest.rows}",
                )
            )
        data = Path(entry.file).with_suffix(".ivfdata").as_posix()
        if entry.file not in intact or (entry.ondisk and data not in intact):
            continue  # already reported; never hand FAISS a corrupt file
        try:
            index: ServedIndex = mapped(
                read_prefix_index(path / entry.file, entry.factory, entry.ondisk)
            )
        except RuntimeError as exc:
            why = str(exc).strip()[-120:]
            faults.append(Fault("index", f"{entry.file}: FAISS cannot read it ({why})"))
            continue
        if index.ntotal != manifest.rows:
            faults.append(
                Fault(
                    "rows", f"{entry.file} holds {index.ntotal} rows, manifest says {manifest.rows}"
                )
            )
        if index.d != entry.length:
            faults.append(
                Fault("index", f"{entry.file} has dimension {index.d}, prefix is {entry.length}")
            )
        if index.metric_type != faiss.METRIC_INNER_PRODUCT:
            faults.append(Fault("index", f"{entry.file} does not use the inner product"))
        if entry.rerank and store is not None and index.ntotal == store.rows:
            index = StoreRerank(index, StoreIndex(store, entry.length))
        check_search_settings(entry, index, faults)
        opened[entry.length] = index
    return opened


def check_search_settings(entry: PrefixEntry, index: ServedIndex, faults: list[str]) -> None:
    """The entry's search setting and every tuned operating point apply to the index, and the
    tuning record's choice is the setting searched; the index is left at the entry's setting."""
    tuning = entry.tuning
    points = [] if tuning is None else [p.search for p in tuning.points]
    for setting in [*points, entry.search]:  # the entry's last: the one left applied
        try:
            index.apply(setting)
        except RuntimeError:
            faults.append(
                Fault(
                    "manifest",
                    f"{entry.file}: search setting {setting!r} does not apply to {entry.factory}",
                )
            )
    if tuning is not None and tuning.status != "untuned" and tuning.chosen != entry.search:
        faults.append(
            Fault(
                "manifest",
                f"{entry.file}: searched with {entry.search!r}, tuned to {tuning.chosen!r}",
            )
        )


def consistency_rows(rows: int, sample: int, seed: int) -> np.ndarray:
    """The rows the prefix cross-check reads: a seeded sample, the first and the last."""
    if rows == 0:
        return np.zeros(0, dtype=np.int64)
    drawn = np.random.default_rng(seed).choice(rows, min(sample, rows), replace=False)
    return np.unique(np.concatenate([drawn, [0, rows - 1]])).astype(np.int64)


def prefix_faults(
    stored: Mapping[int, np.ndarray],
    files: Mapping[int, str],
    rows: np.ndarray,
    tolerance: float = VECTOR_TOLERANCE * 10,
) -> list[str]:
    """Faults of stored prefix vectors of the same rows ({L: [n, L]}): each unit length, and
    each equal to the renormalised head of the longest one within `tolerance` (pure)."""
    faults: list[str] = []
    if not stored:
        return faults
    longest = max(stored)
    for length, vectors in sorted(stored.items()):
        norms = np.linalg.norm(vectors, axis=1)
        bad = np.flatnonzero(np.abs(norms - 1) > VECTOR_TOLERANCE * 10)
        if len(bad):
            faults.append(
                Fault(
                    "vectors",
                    f"{files[length]}: row {rows[bad[0]]} is not unit length "
                    f"(norm {norms[bad[0]]:.4g}; {len(bad)} of {len(rows)} checked rows)",
                )
            )
            continue
        if length == longest:
            continue
        expected = prefix_vectors(stored[longest], length)
        error = np.abs(vectors - expected).max(axis=1)
        bad = np.flatnonzero(error > tolerance)
        if len(bad):
            faults.append(
                Fault(
                    "vectors",
                    f"{files[length]}: row {rows[bad[0]]} disagrees with {files[longest]} by "
                    f"{error[bad[0]]:.3g} ({len(bad)} of {len(rows)} checked rows)",
                )
            )
    return faults


def check_prefix_consistency(
    manifest: BundleManifest,
    indexes: dict[int, ServedIndex],
    sample: int,
    seed: int,
    faults: list[str],
) -> None:
    """Stored prefix vectors of a sample of rows against each other (see the docstring)."""
    rows = consistency_rows(manifest.rows, sample, seed)
    stored, files = {}, {}
    for entry in manifest.prefixes:
        index = indexes.get(entry.length)
        storage = index.exact if index is not None else None
        if storage is None or storage.ntotal != manifest.rows or len(rows) == 0:
            continue
        stored[entry.length] = np.asarray(storage.reconstruct_batch(rows), dtype=np.float32)
        files[entry.length] = entry.file
    store = manifest.store  # float32 prefixes against float16 / int8 heads: the codes' error
    tolerance = VECTOR_TOLERANCE * 10 if store is None else TOLERANCE.get(store["dtype"], 0.0)
    faults.extend(prefix_faults(stored, files, rows, max(tolerance, VECTOR_TOLERANCE * 10)))
