"""What a bundle version costs per row, part by part: on disk, and resident in a replica.

Parts: `store` (the shared vectors and their head norms, indexer/format/store/), `prefix_L` (a
prefix's own index file, with its .ivfdata), `postings`, `ids`, `artifacts` and `vocabulary` (the
open vocabulary's gallery state: indexer/vocabulary/stored_state.py). On disk is
the files' bytes (the manifest's records). Resident is what a serving replica keeps in RAM
once its working set is paged in: every mapped file a search or a filter reads through, i.e.
all of them, except inverted lists on disk (`.ivfdata`, read list by list per probe) and, in a
bundle built `--store-on-disk` (its store record's `on_disk`), the store and the postings'
activations: the store is read through mmap for the k·F candidates of a rerank, the
activations for the entries of the rows an explanation shows (filters read the postings' rows
alone), page by page, so what a replica holds of them is the page cache's to keep or drop.
Pure: it reads the manifest's records only.
"""

from __future__ import annotations

from dataclasses import dataclass

from indexer.format.manifest import BundleManifest
from indexer.format.postings import VALUES


@dataclass(frozen=True)
class Part:
    name: str
    disk: int
    resident: int


def part_of(name: str) -> str:
    """The part a bundle file belongs to."""
    if name.startswith("store_"):
        return "store"
    if name.startswith("prefix_"):
        return name.split(".")[0]
    if name.startswith("postings_"):
        return "postings"
    if name.startswith("vocabulary_"):
        return "vocabulary"
    if name.startswith("artifacts/"):
        return "artifacts"
    return name.split(".")[0]


def footprint(manifest: BundleManifest) -> list[Part]:
    """Bytes per part (module docstring), in the order the manifest lists the files."""
    disk: dict[str, int] = {}
    resident: dict[str, int] = {}
    store_on_disk = bool((manifest.store or {}).get("on_disk", False))
    for name, record in manifest.files.items():
        part = part_of(name)
        disk[part] = disk.get(part, 0) + record.bytes
        read_by_page = part == "store" or name == VALUES
        on_disk = name.endswith(".ivfdata") or (store_on_disk and read_by_page)
        kept = 0 if on_disk else record.bytes
        resident[part] = resident.get(part, 0) + kept
    return [Part(name, disk[name], resident[name]) for name in disk]


def footprint_lines(manifest: BundleManifest) -> list[str]:
    """`strata index info`'s table: bytes per row of each part and the total."""
    rows = max(manifest.rows, 1)
    parts = footprint(manifest)
    total = Part("total", sum(p.disk for p in parts), sum(p.resident for p in parts))
    lines = [f"  {'part':<12} {'disk B/row':>11} {'resident B/row':>15}"]
    for part in [*parts, total]:
        lines.append(f"  {part.name:<12} {part.disk / rows:>11.1f} {part.resident / rows:>15.1f}")
    return lines
