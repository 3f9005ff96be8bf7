"""Verifying a bundle's shared vector store (indexer/format/store/), for indexer/verify/check.py.

The store's files are checksummed with every other file (verify.check_files); here, once
they are intact: the manifest's `store` record names them and covers the contract's prefixes,
the codes are [rows, D] of the recorded dtype, the norms [rows, P] float32, a rotated int8
store's scales [rows, B] float32 and its rotation an orthogonal [D, D], and for the consistency
sample of rows the stored norms are the norms of the decoded heads (a tampered norm, code or
scale that the manifest was edited to match is caught where they disagree).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from indexer.format.manifest import BundleManifest
from indexer.format.store import (
    DTYPES,
    NORMS,
    ROTATION,
    SCALES,
    VECTORS,
    StoreError,
    VectorStore,
    head_norms,
)
from indexer.format.store.block_codes import block_ends, decode_heads
from indexer.format.store.block_layout import block_files, code_files, codes_label
from indexer.verify.faults import Fault

NORM_TOLERANCE = 1e-4  # relative: a stored norm against the norm recomputed from the codes
ORTHOGONALITY = 1e-4  # |RRᵀ − I| a stored rotation may show


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
    blocks = "blocks" in record
    expected = block_files(block_ends(record.get("lengths", []), manifest.dim)) if blocks else []
    if record.get("norms") != NORMS or (
        record.get("blocks") != expected if blocks else record.get("vectors") != VECTORS
    ):
        codes = ", ".join(expected) if blocks else VECTORS
        faults.append(Fault("manifest", f"store record {record} does not name {codes}, {NORMS}"))
        return None
    if blocks and (record.get("dtype") != "int8" or "rotation" not in record):
        faults.append(Fault("manifest", "a store kept by blocks must be a rotated int8 store"))
        return None
    if record.get("dtype") not in DTYPES:
        faults.append(Fault("manifest", f"{VECTORS}: unknown store dtype {record.get('dtype')!r}"))
        return None
    if sorted(record.get("lengths", [])) != sorted(manifest.contract.values()):
        faults.append(Fault("manifest", f"{NORMS}: norms do not cover the contract's prefixes"))
        return None
    rotated = "rotation" in record
    if rotated and (record.get("scales") != SCALES or record.get("rotation") != ROTATION):
        faults.append(
            Fault("manifest", f"store record {record} does not name {SCALES}, {ROTATION}")
        )
        return None
    names = (*code_files(record), NORMS) + ((SCALES, ROTATION) if rotated else ())
    for name in names:
        listed = manifest.files.get(name)
        if listed is None:
            faults.append(Fault("manifest", f"{name}: not listed in the manifest's files"))
            return None
        if name != ROTATION and listed.rows != manifest.rows:
            faults.append(
                Fault("rows", f"{name}: manifest lists {listed.rows} rows, bundle {manifest.rows}")
            )
    if not all(name in intact for name in names):
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


def store_faults(store: VectorStore, rows: int, dim: int, sample: np.ndarray) -> list[str]:
    """Shape and dtype faults of an opened store, and its norms against its codes on `sample`."""
    expected = DTYPES[store.dtype]
    label = codes_label(store.layout)  # the codes' file, or their block files
    if store.codes.dtype != expected or store.codes.shape != (rows, dim):
        return [
            Fault(
                "rows" if store.codes.shape[:1] != (rows,) else "index",
                f"{label}: {store.codes.dtype} {store.codes.shape}, expected {expected} "
                f"({rows}, {dim})",
            )
        ]
    shape = (rows, len(store.lengths))
    if store.norms.dtype != np.dtype("<f4") or store.norms.shape != shape:
        return [
            Fault("index", f"{NORMS}: {store.norms.dtype} {store.norms.shape}, expected {shape}")
        ]
    scales = None
    if store.rotation is not None:
        found = rotation_faults(store, rows, dim)
        if found:
            return found
        scales = np.asarray(store.scales[sample[sample < rows]])
    sample = sample[sample < rows]
    codes = np.asarray(store.codes[sample])
    if not np.isfinite(codes.astype(np.float32)).all():
        return [Fault("vectors", f"{label}: codes that are not finite")]
    if scales is not None and not (np.isfinite(scales).all() and (scales >= 0).all()):
        return [Fault("vectors", f"{SCALES}: scales that are negative or not finite")]
    stored = np.asarray(store.norms[sample])
    recomputed = head_norms(decode_heads(codes, scales, store.ends, dim), store.lengths)
    bad = np.flatnonzero(
        (np.abs(stored - recomputed) > NORM_TOLERANCE * np.maximum(recomputed, 1e-6)).any(axis=1)
    )
    if len(bad):
        return [
            Fault(
                "vectors",
                f"{NORMS}: row {sample[bad[0]]}'s norms disagree with {label} "
                f"({len(bad)} of {len(sample)} checked rows)",
            )
        ]
    return []


def rotation_faults(store: VectorStore, rows: int, dim: int) -> list[str]:
    """The shapes of a rotated store's scales and rotation, and the rotation's orthogonality."""
    shape = (rows, len(store.ends))
    if store.scales.dtype != np.dtype("<f4") or store.scales.shape != shape:
        return [
            Fault("index", f"{SCALES}: {store.scales.dtype} {store.scales.shape}, expected {shape}")
        ]
    rotation = np.asarray(store.rotation, dtype=np.float64)
    if rotation.shape != (dim, dim):
        return [Fault("index", f"{ROTATION}: shape {rotation.shape}, expected ({dim}, {dim})")]
    if np.abs(rotation @ rotation.T - np.eye(dim)).max() > ORTHOGONALITY:
        return [Fault("vectors", f"{ROTATION}: the rotation is not orthogonal")]
    return []
