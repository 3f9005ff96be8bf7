"""A bundle version's manifest.json and the names around it: the format string, version names
(v000007), the CURRENT pointer, and the manifest's records (files, prefixes, artifact sources),
read and written as indexer/format/bundle.py's docstring describes them."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from indexer.format.tuning import Tuning
from training.core.errors import InputError

BUNDLE_FORMAT = "strata.index-bundle/1"
MANIFEST = "manifest.json"
CURRENT = "CURRENT"
ARTIFACT_COPIES = {"grasp": "artifacts/grasp", "cedar": "artifacts/cedar"}
_VERSION = re.compile(r"^v(\d{6,})$")


class BundleError(InputError):
    """A bundle that is missing, malformed, or not what the caller asked for."""


def version_name(version: int) -> str:
    return f"v{version:06d}"


def parse_version_name(name: str) -> int | None:
    match = _VERSION.match(name)
    return int(match.group(1)) if match else None


def read_current(root: Path) -> str | None:
    """The published version's name, or None when nothing is published yet."""
    path = root / CURRENT
    if not path.is_file():
        return None
    name = path.read_text().strip()
    if parse_version_name(name) is None:
        raise BundleError(f"{path} holds {name!r}, not a version name")
    return name


@dataclass
class FileRecord:
    sha256: str
    bytes: int
    rows: int | None = None


@dataclass
class PrefixEntry:
    length: int
    granularity: str
    file: str
    factory: str
    kind: str
    ondisk: bool
    search: str
    reason: str = ""
    tuning: Tuning | None = None  # approximate indexes: indexer/format/tuning.py (absent before)
    store: bool = False  # served from the shared vector store: no file of its own (absent before)
    # compressed codes whose candidates are reranked from the store (format/store_rerank.py)
    rerank: bool = False

    @property
    def own_files(self) -> list[str]:
        """The prefix's own files: its index and, with the lists on disk, the .ivfdata beside
        it; none when it is served from the store."""
        if self.store:
            return []
        if self.ondisk:
            return [self.file, Path(self.file).with_suffix(".ivfdata").as_posix()]
        return [self.file]


@dataclass
class ArtifactSource:
    path: str
    method: str
    manifest_sha256: str
    weights_sha256: str
    copy: str


@dataclass
class BundleManifest:
    version: int
    created_at: str
    encoder: str | None
    modality: str
    dim: int
    k: int
    rows: int
    contract: dict[str, int]
    source: dict[str, Any]
    artifacts: dict[str, ArtifactSource]
    prefixes: list[PrefixEntry]
    postings: dict[str, Any]
    files: dict[str, FileRecord] = field(default_factory=dict)
    build: dict[str, Any] = field(default_factory=dict)
    format: str = BUNDLE_FORMAT
    store: dict[str, Any] | None = None  # the shared vector store (format/store.py); None before
    # the open vocabulary's gallery state (indexer/vocabulary/stored_state.py); None: measured by
    # the service at the first phrase (as in every bundle before it)
    open_vocabulary: dict[str, Any] | None = None
    # the funnels "auto" runs, calibrated at build time (indexer/format/funnel_plans.py); None:
    # calibrated by the service when it loads the version (as in every bundle before it)
    funnels: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return version_name(self.version)

    def to_json(self) -> str:
        return json.dumps({"name": self.name, **asdict(self)}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, where: Path) -> BundleManifest:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BundleError(f"{where} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != BUNDLE_FORMAT:
            found = data.get("format") if isinstance(data, dict) else None
            raise BundleError(f"{where}: not an index bundle manifest (format {found!r})")
        data.pop("name", None)
        try:
            data["artifacts"] = {r: ArtifactSource(**a) for r, a in data["artifacts"].items()}
            data["prefixes"] = [prefix_entry(p) for p in data["prefixes"]]
            data["files"] = {p: FileRecord(**f) for p, f in data.get("files", {}).items()}
            return cls(**data)
        except (KeyError, TypeError, AttributeError) as exc:
            raise BundleError(f"{where}: malformed bundle manifest ({exc})") from exc

    def prefix(self, length: int) -> PrefixEntry:
        for entry in self.prefixes:
            if entry.length == length:
                return entry
        raise BundleError(
            f"the bundle has no prefix of length {length} ({[p.length for p in self.prefixes]})"
        )


def prefix_entry(data: dict[str, Any]) -> PrefixEntry:
    tuning = data.get("tuning")
    return PrefixEntry(**{**data, "tuning": None if tuning is None else Tuning.from_dict(tuning)})


def read_manifest(path: Path) -> BundleManifest:
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise BundleError(f"not an index bundle version (no {MANIFEST}): {path}")
    try:
        text = manifest_path.read_text()
    except UnicodeDecodeError as exc:
        raise BundleError(f"{manifest_path} is not UTF-8 text ({exc.reason})") from None
    return BundleManifest.from_json(text, manifest_path)
