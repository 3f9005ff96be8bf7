"""What verification reports: each fault (its text names the file, its `kind` the reason a
replica gives when it refuses the version), the report, and the refusal.

The kinds: manifest, missing, size, checksum, unlisted, rows, index, postings, ids, artifact,
vectors, sample (indexer/verify/check.py says which check finds each).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from indexer.format.manifest import BundleError

VECTOR_TOLERANCE = 1e-4  # |stored − expected| a prefix vector may differ by
FAULT_KINDS = (
    "manifest",
    "missing",
    "size",
    "checksum",
    "unlisted",
    "rows",
    "index",
    "postings",
    "ids",
    "artifact",
    "vectors",
    "sample",
)


class Fault(str):
    """One fault's text (naming its file), with its `kind` (one of FAULT_KINDS)."""

    kind: str

    def __new__(cls, kind: str, text: str) -> Fault:
        fault = super().__new__(cls, text)
        fault.kind = kind
        return fault


class VersionRefusedError(BundleError):
    """A version that does not verify: never published, swapped in or served."""

    def __init__(self, path: Path, faults: list[str]) -> None:
        self.path, self.faults = path, list(faults)
        first = faults[0]
        self.reason = getattr(first, "kind", "manifest")
        more = (
            f" (+{len(faults) - 1} more; `strata index verify {path}` lists them)"
            if len(faults) > 1
            else ""
        )
        super().__init__(f"{path.name} does not verify, refused: {first}{more}")


@dataclass
class VerifyReport:
    path: Path
    faults: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sampled_rows: int = 0

    @property
    def ok(self) -> bool:
        return not self.faults
