"""Verifying a bundle's shared vector store (indexer/format/store.py), for indexer/verify/check.py.

The store's two files are checksummed with every other file (verify.check_files); here, once
they are intact: the manifest's `store` record names them and covers the contract's prefixes,
the codes are [rows, D] of the recorded dtype, the norms [rows, P] float32, and for the
consistency sample of rows the stored norms are the norms of the codes' heads (a tampered
norm or code that the manifest was edited to match is caught where the two disagree).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from indexer.format.manifest import BundleManifest
from indexer.format.store import DTYPES, NORMS, VECTORS, StoreError, VectorStore, head_norms
from indexer.verify.faults import Fault

NORM_TOLERANCE = 1e-4  # relative: a stored norm against the norm recomputed from the codes


def check_store(
    path: Path, manifest: BundleManifest, intact: set[str], rows: np.ndarray, faults: list[str]
) -> VectorStore | None:
    """The store opened when it verifies (None without one, or when it is damaged: faults)."""
    record = manifest.store
    served = [p.length for p in manifest.prefixes if p.store]
    if record is None:
        if served:
            faults.append(Fault("manifest", f"prefixes {served} are served from a missing store"))
        return None
    if record.get("vectors") != VECTORS or record.get("norms") != NORMS:
        faults.append(Fault("manifest", f"store record {record} does not name {VECTORS}, {NORMS}"))
        return None
    if record.get("dtype") not in DTYPES:
        faults.append(Fault("manifest", f"{VECTORS}: unknown store dtype {record.get('dtype')!r}"))
        return None
    if sorted(record.get("lengths", [])) != sorted(manifest.contract.values()):
        faults.append(Fault("manifest", f"{NORMS}: norms do not cover the contract's prefixes"))
        return None
    for name in FILES_OF_STORE:
        listed = manifest.files.get(name)
        if listed is None:
            faults.append(Fault("manifest", f"{name}: not listed in the manifest's files"))
            return None
        if listed.rows != manifest.rows:
            faults.append(
                Fault("rows", f"{name}: manifest lists {listed.rows} rows, bundle {manifest.rows}")
            )
    if not all(name in intact for name in FILES_OF_STORE):
        return None  # already reported
    try:
        store = VectorStore(path, record)
    except StoreError as exc:
        faults.append(Fault("index", str(exc)))
        return None
    found = store_faults(store, manifest.rows, manifest.dim, rows)
    if store.on_disk:
        store.release()  # the sample's pages (large folios map far more than its rows)
    faults.extend(found)
    return None if found else store


FILES_OF_STORE = (VECTORS, NORMS)


def store_faults(store: VectorStore, rows: int, dim: int, sample: np.ndarray) -> list[str]:
    """Shape and dtype faults of an opened store, and its norms against its codes on `sample`."""
    expected = DTYPES[store.dtype]
    if store.codes.dtype != expected or store.codes.shape != (rows, dim):
        return [
            Fault(
                "rows" if store.codes.shape[:1] != (rows,) else "index",
                f"{VECTORS}: {store.codes.dtype} {store.codes.shape}, expected {expected} "
                f"({rows}, {dim})",
            )
        ]
    shape = (rows, len(store.lengths))
    if store.norms.dtype != np.dtype("<f4") or store.norms.shape != shape:
        return [
            Fault("index", f"{NORMS}: {store.norms.dtype} {store.norms.shape}, expected {shape}")
        ]
    sample = sample[sample < rows]
    codes = np.asarray(store.codes[sample])
    if not np.isfinite(codes.astype(np.float32)).all():
        return [Fault("vectors", f"{VECTORS}: codes that are not finite")]
    stored = np.asarray(store.norms[sample])
    recomputed = head_norms(codes, store.lengths)
    bad = np.flatnonzero(
        (np.abs(stored - recomputed) > NORM_TOLERANCE * np.maximum(recomputed, 1e-6)).any(axis=1)
    )
    if len(bad):
        return [
            Fault(
                "vectors",
                f"{NORMS}: row {sample[bad[0]]}'s norms disagree with {VECTORS} "
                f"({len(bad)} of {len(sample)} checked rows)",
            )
        ]
    return []
