"""The index bundle: the one module that owns this format (design.md, format 3), and its reader.

A bundle directory holds versions, and a pointer to the published one:

    BUNDLES/
      CURRENT                     the published version's name ("v000007\\n"), replaced atomically
      v000006/  v000007/          whole versions (the last --keep of them)
      .tmp-v000008-PID/           a version being written (hidden; removed by the next build)
      .lock                       held (flock) by the build that is running

    v000007/
      manifest.json               below
      store_vectors.npy           with a store (format 4, indexer/store.py): every row's unit
      store_norms.npy             rotated vector once (float16 or int8 [N, D]) and its head
                                  norms at each prefix (float32 [N, P]); Flat prefixes are
                                  served from it and have no file of their own
      prefix_{L}.faiss            one FAISS index per prefix length L of the contract (with a
                                  store: only the prefixes that need their own: the shortest,
                                  the shortlist, and approximate ones), inner product, FAISS
                                  id = row position; an IVF with lists on disk adds .ivfdata
      postings_indptr.npy         CSR concept postings (indexer/postings.py): int64 [2D + 1],
      postings_rows.npy           int32 row ids (the narrowest type: indexer.postings.row_dtype;
                                  int64 before) and float32 activations [N·k]
      postings_values.npy
      ids.parquet                 row r = gallery row r: `id` and the cache's metadata columns
      artifacts/grasp/            copies of the two transform artifacts (manifest.json +
      artifacts/cedar/            weights.safetensors), so a bundle is self-contained

manifest.json (`format` "strata.index-bundle/1"): version, name, created_at (UTC), encoder,
modality, dim, k (CEDAR's active concepts per row), rows, the granularity → prefix-length
contract, `source` (the cache's path, the sha256 of its manifest.json, its rows and shards),
`artifacts` (per role grasp / cedar: original path, method, sha256 of its manifest.json and of
its weights.safetensors, the copy's folder), `prefixes` (per prefix: length, granularity, file,
FAISS factory string, rule kind, on-disk lists or not, search parameters, why this index, and
for an approximate index its `tuning`: recall target, the operating points measured at build
time and the chosen one's recall@k and latency, indexer/tuning.py; absent in older bundles),
`postings` (concepts = 2D, entries = N·k), `files` (every file: sha256, bytes, rows — the rows or
entries it holds, null for artifact files), `build` (seconds, memory budget, FAISS version,
GPU used) and `store` (its files, dtype and the prefixes its norms cover; null without one, as
in every bundle before format 4, which load and serve as they did); a prefix served from the
store has `store: true` and no file.

Stored vectors: p_L(x) = z[:L] / ‖z[:L]‖ with z = (x − mean) @ Rᵀ, R and mean those of the GraSP
copy; a query goes through `Bundle.rotate` and is renormalised per prefix the same way, so every
score is the cosine of the first L rotated coordinates.

A version becomes visible only through CURRENT, written after every file is fsynced and
verified and the version folder renamed into place (indexer/versions.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from indexer.ids import IDS, read_ids
from indexer.postings import Postings, entries_of_rows
from indexer.prefix_index import apply_search_parameters, read_prefix_index, search_parameters
from indexer.row_bitmaps import ConceptBitmaps
from indexer.store import StoreIndex, VectorStore
from indexer.tuning import Tuning
from training.cedar.concepts import ConceptCoder
from training.core.artifacts import TransformArtifact
from training.core.errors import InputError
from training.core.granularity import Contract, Granularity, validate_contract
from training.core.metrics import prefix_vectors

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
    tuning: Tuning | None = None  # approximate indexes: indexer/tuning.py (absent before)
    store: bool = False  # served from the shared vector store: no file of its own (absent before)


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
    store: dict[str, Any] | None = None  # the shared vector store (indexer/store.py); None before

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


class Bundle:
    """One version of an index bundle, opened for searching (indexes memory-mapped on first use).

    Two ways in: `search(embeddings, at, k)` takes embeddings as the encoder gives them (unit
    rows in the original space) and rotates them; `search_prefix(L, rotated, k)` takes rows
    already rotated with `rotate` (do it once per query and search several prefixes).
    """

    def __init__(self, path: Path, manifest: BundleManifest) -> None:
        self.path = path
        self.manifest = manifest
        self._indexes: dict[int, faiss.Index] = {}

    @classmethod
    def open(cls, root: str | Path) -> Bundle:
        """The published version of a bundle directory (follows CURRENT), or a version folder."""
        root = Path(root).expanduser()
        if (root / MANIFEST).is_file():
            return cls.open_version(root)
        if not root.is_dir():
            raise BundleError(f"bundle directory not found: {root}")
        name = read_current(root)
        if name is None:
            raise BundleError(f"{root} has no published bundle (no {CURRENT})")
        return cls.open_version(root / name)

    @classmethod
    def open_version(cls, path: str | Path) -> Bundle:
        path = Path(path).expanduser()
        return cls(path, read_manifest(path))

    def load(self) -> Bundle:
        """Open everything now: every prefix index, the ids, the postings, both artifacts.

        A service calls this when it swaps a version in. Open files and memory maps outlive
        the folder's removal, so a loaded version keeps serving even after retention deletes
        it; a lazily opened one would fail on the first prefix it had not touched yet."""
        for length in self.prefix_lengths:
            self.index(length)
        _ = self.store, self._ids, self._postings, self.grasp, self.coder
        return self

    # --- description ---

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> int:
        return self.manifest.version

    @property
    def rows(self) -> int:
        return self.manifest.rows

    @property
    def dim(self) -> int:
        return self.manifest.dim

    @property
    def contract(self) -> Contract:
        return validate_contract(self.manifest.contract, self.manifest.dim)

    @property
    def prefix_lengths(self) -> list[int]:
        return [p.length for p in self.manifest.prefixes]

    def prefix_length(self, at: Granularity | str | int) -> int:
        """The prefix length of a granularity ('object', Granularity.OBJECT) or a length."""
        if isinstance(at, int | np.integer):
            self.manifest.prefix(int(at))
            return int(at)
        try:
            return self.contract[Granularity(str(at))]
        except ValueError:
            raise BundleError(
                f"unknown granularity {at!r} ({', '.join(g.value for g in Granularity)})"
            ) from None

    # --- the transforms ---

    @cached_property
    def grasp(self) -> TransformArtifact:
        return TransformArtifact.load(self.path / self.manifest.artifacts["grasp"].copy)

    @cached_property
    def coder(self) -> ConceptCoder:
        return ConceptCoder(
            TransformArtifact.load(self.path / self.manifest.artifacts["cedar"].copy)
        )

    def rotate(self, embeddings: np.ndarray) -> np.ndarray:
        """z = (x − mean) @ Rᵀ with the bundle's GraSP artifact, float32 [Q, D]."""
        return self.grasp.apply(np.asarray(embeddings, dtype=np.float32))

    # --- search ---

    @cached_property
    def store(self) -> VectorStore | None:
        """The shared vector store (memory-mapped), or None in a bundle written without one."""
        record = self.manifest.store
        return None if record is None else VectorStore(self.path, record)

    def index(self, length: int) -> faiss.Index | StoreIndex:
        """The prefix's FAISS index, memory-mapped, with the manifest's search parameters; a
        prefix served from the store gets the store's exact view (indexer/store.py)."""
        if length not in self._indexes:
            entry = self.manifest.prefix(length)
            if entry.store:
                if self.store is None:
                    raise BundleError(f"prefix {length} is served from a store the bundle lacks")
                self._indexes[length] = StoreIndex(self.store, length)
                return self._indexes[length]
            index = read_prefix_index(self.path / entry.file, entry.factory, entry.ondisk)
            apply_search_parameters(index, entry.search)
            self._indexes[length] = index
        return self._indexes[length]

    def search_prefix(
        self, length: int, rotated: np.ndarray, k: int, setting: str = ""
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores [Q, k] float32, rows [Q, k] int64) at prefix L for rotated queries [Q, ≥ L]:
        each query's first L coordinates are renormalised; rows are −1 past the last hit.
        `setting`: search parameters other than the manifest's (a ParameterSpace string, e.g.
        one of the prefix's tuned operating points), for this call only."""
        rotated = np.atleast_2d(np.asarray(rotated, dtype=np.float32))
        if rotated.shape[1] < length:
            raise BundleError(f"queries have {rotated.shape[1]} coordinates, prefix needs {length}")
        if k < 1:
            raise BundleError(f"k must be positive, got {k}")
        index = self.index(length)
        params = search_parameters(index, setting) if setting else None
        scores, rows = index.search(prefix_vectors(rotated, length), k, params=params)
        return scores, rows

    def search(
        self, embeddings: np.ndarray, at: Granularity | str | int, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rotate raw query embeddings, then `search_prefix` at a granularity or length."""
        return self.search_prefix(self.prefix_length(at), self.rotate(embeddings), k)

    # --- rows and concepts ---

    @cached_property
    def _ids(self) -> pa.Array:
        return read_ids(self.path / IDS)

    def ids(self, rows: np.ndarray | list[int]) -> list[str | None] | list[list[str | None]]:
        """The cache ids of row positions (None for −1); a 2-d array gives a list of lists."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.ndim == 2:
            return [self.ids(r) for r in rows]
        if ((rows < -1) | (rows >= self.rows)).any():
            raise BundleError(f"row positions must lie in [0, {self.rows})")
        found = self._ids.take(pa.array(np.where(rows < 0, 0, rows))).to_pylist()
        return [None if r < 0 else i for r, i in zip(rows, found, strict=True)]

    @cached_property
    def _table(self) -> pa.Table:
        return pq.read_table(self.path / IDS, memory_map=True)

    def metadata_table(self) -> pa.Table:
        """The whole ids.parquet table (id and metadata columns), read once into RAM."""
        return self._table

    def metadata(self, rows: np.ndarray | list[int]) -> pa.Table:
        """The ids.parquet rows (id and metadata columns) of row positions, in that order. The
        first call reads the whole table into RAM (the metadata, not the vectors)."""
        return self._table.take(pa.array(np.asarray(rows, dtype=np.int64)))

    @cached_property
    def _postings(self) -> Postings:
        return Postings(self.path)

    @cached_property
    def concept_bitmaps(self) -> ConceptBitmaps:
        """The dense concepts' rows as bitmaps, each built on first use (indexer/row_bitmaps)."""
        return ConceptBitmaps(self.rows, lambda concept: self.postings(concept)[0])

    def entries_of_rows(
        self, first_concept: int, rows: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, concept, activation) of the postings entries of `rows` among the concepts
        from `first_concept` on (indexer.postings.entries_of_rows)."""
        p = self._postings
        return entries_of_rows(p.indptr, p.rows, p.values, first_concept, rows)

    def postings(self, concept: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows int64 ascending, activations float32) of the rows where the concept is active."""
        try:
            return self._postings.get(int(concept))
        except IndexError as exc:
            raise BundleError(str(exc)) from None

    def concepts(self, query: str | int) -> list[int]:
        """Concept ids a filter means: an id, a label ('+12', '-3') or a name (CEDAR catalog)."""
        return self.coder.resolve(query)
