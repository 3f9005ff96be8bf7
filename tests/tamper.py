"""Damage done to a copy of a bundle version, the way corruption or an operator would: a byte
flipped, a file truncated, a manifest edited to match a tampered file. The refusal tests (every
damage at the verifier, and on each path a version takes to users) use these.

Every damage takes a version folder and changes it in place (work on a copy)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from indexer.format.manifest import MANIFEST, read_manifest
from indexer.format.postings import CHUNK_ROWS, CHUNKS, INDPTR, LOW_DTYPE, ROWS, VALUES

Damage = Callable[[Path], None]


def flip_byte(path: Path, offset: int | None = None) -> None:
    """XOR one byte with 0xFF: by default the one in the middle of the file (its payload, past
    any header)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path, keep: float = 0.5) -> None:
    """Cut a file to the first `keep` share of its bytes (a copy that stopped half-way)."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def edit_manifest(version: Path, change: Callable[[dict], None]) -> None:
    manifest = json.loads((version / MANIFEST).read_text())
    change(manifest)
    (version / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def relist(version: Path, *names: str) -> None:
    """Record the files' present sha256 and size in the manifest: the edit that hides a
    tampered file from the checksums."""

    def change(manifest: dict) -> None:
        for name in names:
            data = (version / name).read_bytes()
            manifest["files"][name].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))

    edit_manifest(version, change)


def file_kinds(version: Path) -> dict[str, str]:
    """One file of each kind in a version: kind → relative name (the postings chunk table
    where the version has one)."""
    manifest = read_manifest(version)
    longest = max(p.length for p in manifest.prefixes)
    shortest = min(p.length for p in manifest.prefixes)
    kinds = {
        "prefix index": f"prefix_{shortest if shortest != longest else longest}.faiss",
        "postings indptr": INDPTR,
        "postings rows": ROWS,
        "postings chunks": CHUNKS,
        "postings values": VALUES,
        "ids": "ids.parquet",
        "artifact weights": "artifacts/grasp/weights.safetensors",
        "artifact manifest": "artifacts/cedar/manifest.json",
    }
    if CHUNKS not in manifest.files:
        del kinds["postings chunks"]
    return kinds


def drop_last_ids(version: Path) -> None:
    """ids.parquet rewritten without its last row, and re-listed in the manifest."""
    table = pq.read_table(version / "ids.parquet")
    pq.write_table(table.slice(0, table.num_rows - 1), version / "ids.parquet")
    relist(version, "ids.parquet")


def swap_prefix_rows(version: Path) -> None:
    """The shortest prefix index rewritten with rows 0 and 1 exchanged (a valid FAISS file of
    the right size), and re-listed in the manifest."""
    import faiss

    manifest = read_manifest(version)
    entry = min(manifest.prefixes, key=lambda p: p.length)
    index = faiss.read_index(str(version / entry.file))
    vectors = index.reconstruct_n(0, index.ntotal)
    vectors[[0, 1]] = vectors[[1, 0]]
    swapped = faiss.IndexFlatIP(index.d)
    swapped.add(np.ascontiguousarray(vectors))
    faiss.write_index(swapped, str(version / entry.file))
    relist(version, entry.file)


def shift_posting_rows(version: Path) -> None:
    """postings_rows.npy with one concept's first row id moved to another row (the file still
    parses; in the compact format its low bits, within its 65,536-row chunk), re-listed in the
    manifest."""
    rows = np.load(version / ROWS)
    indptr = np.load(version / INDPTR)
    concept = int(np.flatnonzero(np.diff(indptr) > 1)[0])
    start = int(indptr[concept])
    span = max(1, read_manifest(version).rows)
    if rows.dtype == LOW_DTYPE:
        span = min(span, CHUNK_ROWS)
    rows[start] = (int(rows[start]) + 1) % span
    np.save(version / ROWS, rows, allow_pickle=False)
    relist(version, ROWS)


def damages(version: Path) -> dict[str, Damage]:
    """Every damage of the refusal table, by name (kinds of `file_kinds(version)`)."""
    kinds = file_kinds(version)
    table: dict[str, Damage] = {}
    for kind, name in kinds.items():
        table[f"flipped byte: {kind}"] = lambda v, n=name: flip_byte(v / n)
    for kind in ("prefix index", "postings rows", "ids"):
        table[f"truncated: {kind}"] = lambda v, n=kinds[kind]: truncate(v / n)
    table["flipped byte: manifest"] = lambda v: flip_byte(v / MANIFEST)
    table["manifest edited: rows + 1"] = lambda v: edit_manifest(
        v, lambda m: m.update(rows=m["rows"] + 1)
    )
    table["manifest re-listed: prefix rows swapped"] = swap_prefix_rows
    table["manifest re-listed: an id dropped"] = drop_last_ids
    table["manifest re-listed: a posting moved"] = shift_posting_rows
    table["partly written: no manifest"] = lambda v: (v / MANIFEST).unlink()
    return table
