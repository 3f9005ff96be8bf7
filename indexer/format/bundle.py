"""The index bundle: the one module that owns this format, and its reader
(docs/reference/formats.md#index-bundles).

A bundle directory holds versions, and a pointer to the published one:

    BUNDLES/
      CURRENT                     the published version's name ("v000007\\n"), replaced atomically
      v000006/  v000007/          whole versions (the last --keep of them)
      .tmp-v000008-PID/           a version being written (hidden; removed by the next build)
      .lock                       held (flock) by the build that is running

    v000007/
      manifest.json               below
      store_vectors.npy           with a store (format 4, indexer/format/store/): every row's unit
      store_norms.npy             rotated vector once (float16 or int8 [N, D]) and its head
                                  norms at each prefix (float32 [N, P]); Flat prefixes are
                                  served from it and have no file of their own
      prefix_{L}.faiss            one FAISS index per prefix length L of the contract (with a
                                  store: only the prefixes that need their own: the shortest,
                                  the shortlist, and approximate ones), inner product, FAISS
                                  id = row position; an IVF with lists on disk adds .ivfdata
      postings_indptr.npy         CSR concept postings (indexer/format/postings.py) over C
      postings_rows.npy           concepts (2D axes, then the readout's words) and E entries
      postings_chunks.npy         (N·k, plus the words'): int64 [C + 1] offsets; the row ids'
      postings_values.npy         low 16 bits, uint16 [E]; int64 [C, H + 1] offsets of each
                                  concept's 65,536-row chunks (H = ⌈N / 65,536⌉); float16
                                  activations [E]. 4 B an entry: 128 B a row at k = 32. Written
                                  before: no chunk table, absolute row ids (int32, the narrowest
                                  type; int64 before), float32 activations: 8 B an entry
      ids.parquet                 row r = gallery row r: `id` and the cache's metadata columns
      vocabulary_*.npy            the open vocabulary's gallery state, where the CEDAR artifact
      vocabulary_sketch.faiss     keeps its words' text directions: every row's hub value, the
                                  moments of [x̃, h], and past 131,072 rows the sketch
                                  (indexer/vocabulary/stored_state.py, which reads and writes
                                  them; the manifest's `open_vocabulary` record)
      artifacts/grasp/            copies of the two transform artifacts (manifest.json +
      artifacts/cedar/            weights.safetensors), so a bundle is self-contained

manifest.json (`format` "strata.index-bundle/1"): version, name, created_at (UTC), encoder,
modality, dim, k (CEDAR's active concepts per row), rows, the granularity → prefix-length
contract, `source` (the cache's path, the sha256 of its manifest.json, its rows and shards),
`artifacts` (per role grasp / cedar: original path, method, sha256 of its manifest.json and of
its weights.safetensors, the copy's folder), `prefixes` (per prefix: length, granularity, file,
FAISS factory string, rule kind, on-disk lists or not, search parameters, why this index, and
for an approximate index its `tuning`: recall target, the operating points measured at build
time and the chosen one's recall@k and latency, indexer/format/tuning.py; absent in older bundles),
`postings` (concepts = 2D, entries = N·k), `files` (every file: sha256, bytes, rows — the rows or
entries it holds, null for artifact files), `build` (seconds, memory budget, FAISS version,
GPU used) and `store` (its files, dtype and the prefixes its norms cover; null without one, as
in every bundle before format 4, which load and serve as they did); a prefix served from the
store has `store: true` and no file.

Stored vectors: p_L(x) = z[:L] / ‖z[:L]‖ with z = (x − mean) @ Rᵀ, R and mean those of the GraSP
copy; a query goes through `Bundle.rotate` and is renormalised per prefix the same way, so every
score is the cosine of the first L rotated coordinates.

A version becomes visible only through CURRENT, written after every file is fsynced and
verified and the version folder renamed into place (indexer/versions/bundle_store.py). Its
files are written once, each created new in the staging folder, and never opened for writing
again; a reader checks each file it memory-maps against the manifest's `files` before mapping
it (indexer/format/mapped.py).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from indexer.format.ids import IDS, read_ids
from indexer.format.manifest import (
    CURRENT,
    MANIFEST,
    BundleError,
    BundleManifest,
    read_current,
    read_manifest,
)
from indexer.format.mapped import check_mapped_files
from indexer.format.postings import FILES as POSTINGS_FILES
from indexer.format.postings import Postings
from indexer.format.prefix_index import IndexFileError
from indexer.format.row_bitmaps import ConceptBitmaps
from indexer.format.served.params import SearchParams
from indexer.format.served_index import ServedIndex, open_served
from indexer.format.store import VectorStore
from training.cedar.concepts import ConceptCoder
from training.core.artifacts import TransformArtifact
from training.core.granularity import (
    Contract,
    Granularity,
    GranularityError,
    parse_granularity,
    validate_contract,
)
from training.core.metrics import prefix_vectors

# each concept's agreement on the version's gallery (written by indexer/vocabulary/agreement.py)
GALLERY_AGREEMENT = "vocabulary_agreement.npy"
GALLERY_AGREEMENT_COUNTS = "vocabulary_agreement_counts.npy"


class Bundle:
    """One version of an index bundle, opened for searching (indexes memory-mapped on first use).

    Two ways in: `search(embeddings, at, k)` takes embeddings as the encoder gives them (unit
    rows in the original space) and rotates them; `search_prefix(L, rotated, k)` takes rows
    already rotated with `rotate` (do it once per query and search several prefixes).
    """

    def __init__(self, path: Path, manifest: BundleManifest) -> None:
        self.path = path
        self.manifest = manifest
        self._indexes: dict[int, ServedIndex] = {}

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

        A service calls this when it swaps a version in. Every file that is memory-mapped (the
        store, each prefix's index, the postings) is first checked against the manifest's
        record — size, then sha256 — and a damaged one is refused with a BundleError or
        StoreError naming it (indexer/format/mapped.py), before anything is mapped that could
        fault later. Open files and memory maps outlive the folder's removal, so a loaded
        version keeps serving even after retention deletes it; a lazily opened one would fail
        on the first prefix it had not touched yet."""
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
            granularity = parse_granularity(at, auto=False)
        except GranularityError as exc:
            raise BundleError(str(exc)) from None
        return self.contract[granularity]

    # --- the transforms ---

    @cached_property
    def grasp(self) -> TransformArtifact:
        return TransformArtifact.load(self.path / self.manifest.artifacts["grasp"].copy)

    @cached_property
    def coder(self) -> ConceptCoder:
        """The CEDAR artifact's coder as this version's gallery shows its concepts: each held
        to its agreement here where the version measured it, and to its shift from the
        artifact's reference where both kept counts (training.cedar.gallery_trust)."""
        coder = ConceptCoder(
            TransformArtifact.load(self.path / self.manifest.artifacts["cedar"].copy)
        )
        return coder.on_gallery(
            self.gallery_agreement(GALLERY_AGREEMENT),
            self.gallery_agreement(GALLERY_AGREEMENT_COUNTS),
        )

    def gallery_agreement(self, name: str = GALLERY_AGREEMENT) -> np.ndarray | None:
        """Each concept's agreement on this version's gallery (written with its open-vocabulary
        state: indexer/vocabulary/agreement.py): float32 [concepts] its share, or with
        GALLERY_AGREEMENT_COUNTS int32 [concepts, 2] its counts; the file checked against the
        manifest; None where the version measured none (or, made before counts were kept, no
        counts)."""
        record = (self.manifest.open_vocabulary or {}).get("agreement")
        if not record or (name == GALLERY_AGREEMENT_COUNTS and "counts" not in record):
            return None
        check_mapped_files(self.path, self.manifest.files, (name,), BundleError)
        return np.load(self.path / name, allow_pickle=False)

    def rotate(self, embeddings: np.ndarray) -> np.ndarray:
        """z = (x − mean) @ Rᵀ with the bundle's GraSP artifact, float32 [Q, D]."""
        return self.grasp.apply(np.asarray(embeddings, dtype=np.float32))

    # --- search ---

    @cached_property
    def store(self) -> VectorStore | None:
        """The shared vector store (memory-mapped), or None in a bundle written without one."""
        record = self.manifest.store
        return None if record is None else VectorStore(self.path, record, self.manifest.files)

    def index(self, length: int) -> ServedIndex:
        """The prefix's index as served (indexer/format/served_index.py): its FAISS index
        memory-mapped, the store's exact view, or codes reranked from the store, each behind
        the one interface. Its own files are checked against the manifest before they are
        mapped (`load`)."""
        if length not in self._indexes:
            entry = self.manifest.prefix(length)
            if not entry.store:
                check_mapped_files(self.path, self.manifest.files, entry.own_files, BundleError)
            try:
                self._indexes[length] = open_served(self.path, entry, self.store)
            except IndexFileError as exc:
                if entry.store or entry.rerank:
                    raise BundleError(str(exc)) from None
                raise
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
        params = SearchParams.parse(setting) if setting else None
        return index.search(prefix_vectors(rotated, length), k, params)

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
        check_mapped_files(self.path, self.manifest.files, POSTINGS_FILES, BundleError)
        on_disk = bool((self.manifest.store or {}).get("on_disk", False))
        return Postings(self.path, values_on_disk=on_disk)

    @cached_property
    def concept_bitmaps(self) -> ConceptBitmaps:
        """The dense concepts' rows as bitmaps, each built on first use (indexer/row_bitmaps)."""
        return ConceptBitmaps(self.rows, self.concept_rows)

    def entries_of_rows(
        self, first_concept: int, rows: np.ndarray, stop: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, concept, activation) of the postings entries of `rows` among the concepts
        [first_concept, stop) (None: to the last), in concept order (Postings.entries_of_rows)."""
        return self._postings.entries_of_rows(rows, first_concept, stop)

    def postings(self, concept: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows int64 ascending, activations float32) of the rows where the concept is active."""
        try:
            return self._postings.get(int(concept))
        except IndexError as exc:
            raise BundleError(str(exc)) from None

    def concept_rows(self, concept: int) -> np.ndarray:
        """The rows (int64 ascending) where the concept is active, without their activations
        (a filter's read: with the store on disk, the activations stay there)."""
        try:
            return self._postings.rows_of(int(concept))
        except IndexError as exc:
            raise BundleError(str(exc)) from None

    def concepts(self, query: str | int) -> list[int]:
        """Concept ids a filter means: an id, a label ('+12', '-3') or a name (CEDAR catalog)."""
        return self.coder.resolve(query)
