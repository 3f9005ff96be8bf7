"""`strata index verify`: is a bundle version whole, consistent, and what its cache says?

Checks, each fault one line that names the file:

- the manifest: format, and every file it lists present with its size and sha256; no file
  it does not list (a leftover would mean the version was not written by one build). The
  standalone command reads every file back; a build, right after writing a version, passes
  the digests it computed on the bytes it wrote (Flat indexes, postings) and only the other
  files are read back;
- each prefix index: FAISS reads it, ntotal = rows, d = L, inner-product metric; a shared
  store's codes and norms (indexer/verify/store.py) where prefixes are served from one;
- the postings: indptr [2D + 1] from 0, monotone, ending at the entry count; the chunk table
  (postings_chunks.npy, absent in bundles written before it) [C, ⌈N / 65,536⌉ + 1], monotone
  within a concept, each concept's first and last offset indptr's; rows (the low bits decoded
  through that table, or the older absolute ids) in [0, N), strictly increasing within a
  concept, each row exactly k times; activations finite, ≥ 0;
- ids.parquet: N rows, ids unique and not null;
- the open vocabulary's kept state, where the manifest records one (indexer/verify/
  vocabulary.py): its files listed, the hub values [N], the moments [D + 1] and
  [D + 1, D + 1] finite, the kept sample at most N rows, the sketch every row;
- both artifact copies load (TransformArtifact.load checks their checksums and that the
  rotations are orthogonal) and match the hashes, dim, contract and k the manifest records;
- a seeded sample of rows against the source cache (when it is still there and unchanged:
  indexer/verify/sample.py): each stored prefix vector equals p_L recomputed from the cache
  row, the ids agree, and the row's k concepts are in the postings with the recomputed
  activations. A version made by `strata index add` records `source.cache_first_row`: its
  rows from there on are the added cache's, and those are the rows sampled. A version made by
  `strata index delete` has no source cache (its rows were renumbered): the sample check is
  skipped, noted.

- cross-checks that need no cache, so that a manifest edited to match a tampered file is still
  caught where the files disagree with each other: every file's recorded row count against
  what the file holds (index ntotal, ids rows, postings entries, indptr length, chunk table
  concepts), and for a sample of rows (`consistency`, 256 by default, plus the first and
  last) the stored vectors
  of every exactly stored prefix are unit length and equal the renormalised head of the
  longest exactly stored prefix (p_L = normalise(p_M[:L]),
  docs/reference/metrics.md#prefix-similarity). What this cannot see:
  a tampered file re-listed in the manifest whose damage is self-consistent — vectors changed
  in rows the sample misses and in every prefix alike, a changed id (unique, not null), a
  changed activation (finite, ≥ 0) or metadata column. The source-cache sample catches the
  first two where the cache is still there; nothing here catches the last two.

Every fault is a `Fault` (indexer/verify/faults.py): its text names the file, its `kind` (missing,
size, checksum, unlisted, manifest, rows, index, postings, ids, artifact, vectors, sample) is
the reason a serving replica reports when it refuses the version.

`check_servable(path)` is what every path that makes a version current or serves it runs —
`strata index publish`, a hot swap, AdminService.Reload and `strata serve` start-up: the same
`verify_bundle`, without the source-cache sample (a replica need not see the cache; `publish`
runs the sample too), raising `VersionRefusedError` (one line naming the first fault's file).
Loading the version then checks the files it memory-maps once more, size and sha256, right
before mapping them (`Bundle.load`, indexer/format/mapped.py).

FAISS indexes whose checksum fails are not opened (a corrupt file could crash the reader).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from indexer.format.ids import IDS
from indexer.format.manifest import (
    CURRENT,
    MANIFEST,
    BundleError,
    BundleManifest,
    read_current,
    read_manifest,
)
from indexer.format.postings import CHUNKS, INDPTR, ROWS, VALUES, Postings, postings_faults
from indexer.format.postings import FILES as POSTINGS_FILES
from indexer.format.store.faiss_view import StoreIndex
from indexer.verify.faults import Fault, VerifyReport, VersionRefusedError
from indexer.verify.indexes import check_indexes, check_prefix_consistency, consistency_rows
from indexer.verify.sample import check_sample
from indexer.verify.store import check_store
from indexer.verify.vocabulary import check_vocabulary
from training.cedar.concepts import ConceptCoder
from training.core.artifacts import MANIFEST as ARTIFACT_MANIFEST
from training.core.artifacts import WEIGHTS as ARTIFACT_WEIGHTS
from training.core.artifacts import TransformArtifact
from training.core.errors import InputError
from training.core.files import sha256_file

CONSISTENCY_SAMPLE = 256  # rows whose stored prefix vectors are checked against each other


def verify_bundle(
    path: Path,
    cache_dir: Path | None = None,
    sample: int = 64,
    seed: int = 0,
    written: Mapping[str, str] | None = None,
    consistency: int = CONSISTENCY_SAMPLE,
) -> VerifyReport:
    """Every fault of one bundle version (see the module docstring).

    `written`: for a version this process has just written, the sha256 of files computed from
    the bytes as they were written (relative name → digest); those files are checked for
    presence, size and that digest, not read back. Everything else is checked in full.
    `consistency`: rows whose stored prefix vectors are checked against each other."""
    report = VerifyReport(path)
    try:
        manifest = read_manifest(path)
    except BundleError as exc:
        report.faults.append(Fault("manifest", str(exc)))
        return report
    intact = check_files(path, manifest, report.faults, written or {})
    sampled = consistency_rows(manifest.rows, max(consistency, 1), seed)
    store = check_store(path, manifest, intact, sampled, report.faults)
    indexes = check_indexes(path, manifest, intact, report.faults, store)
    for entry in manifest.prefixes:  # the prefixes served from the store: its exact view
        if entry.store and store is not None:
            indexes[entry.length] = StoreIndex(store, entry.length)
    check_postings(path, manifest, intact, report.faults)
    check_ids(path, manifest, intact, report.faults)
    check_vocabulary(path, manifest, intact, report.faults)
    if consistency > 0:
        check_prefix_consistency(manifest, indexes, consistency, seed, report.faults)
        if store is not None and store.on_disk:
            store.release()  # the sample's pages: large folios map far more than its rows
    artifacts = check_artifacts(path, manifest, intact, report.faults)
    if sample > 0 and artifacts is not None and IDS in intact:
        postings_ok = all(name in intact for name in postings_files(manifest))
        check_sample(
            path, manifest, indexes, artifacts, postings_ok, cache_dir, sample, seed, report
        )
    return report


def check_files(
    path: Path, manifest: BundleManifest, faults: list[str], written: Mapping[str, str]
) -> set[str]:
    """Presence, size and sha256 of every listed file (the digest in `written` where a file
    has one, else read back); unlisted files. Returns the intact."""
    intact = set()
    for name, record in manifest.files.items():
        file = path / name
        if not file.is_file():
            faults.append(Fault("missing", f"missing {name}"))
        elif file.stat().st_size != record.bytes:
            size = file.stat().st_size
            faults.append(Fault("size", f"{name}: {size} bytes, manifest says {record.bytes}"))
        elif (written[name] if name in written else sha256_file(file)) != record.sha256:
            faults.append(Fault("checksum", f"{name}: checksum mismatch"))
        else:
            intact.add(name)
    for folder, _, files in os.walk(path):
        for file in files:
            name = (Path(folder) / file).relative_to(path).as_posix()
            if name != MANIFEST and name not in manifest.files:
                faults.append(Fault("unlisted", f"unlisted file {name}"))
    return intact


def postings_files(manifest: BundleManifest) -> list[str]:
    """The postings files a version lists: all four, or the older three (no chunk table)."""
    return [name for name in POSTINGS_FILES if name != CHUNKS or name in manifest.files]


def check_postings(
    path: Path, manifest: BundleManifest, intact: set[str], faults: list[str]
) -> None:
    if not all(name in intact for name in postings_files(manifest)):
        return
    postings = Postings(path)
    axes = 2 * manifest.dim
    concepts = int(manifest.postings.get("concepts", axes))  # 2D axes, then the readout's words
    if postings.concepts != concepts or concepts < axes:
        faults.append(
            Fault(
                "postings",
                f"{INDPTR}: {postings.concepts} concepts, expected {concepts} (2·D = {axes} "
                "axes, then the word concepts)",
            )
        )
        return
    held = {INDPTR: len(postings.indptr), ROWS: len(postings.rows), VALUES: len(postings.values)}
    if postings.chunks is not None:
        held[CHUNKS] = len(postings.chunks)  # a row of the table per concept
    for name, count in held.items():
        recorded = manifest.files[name].rows
        if recorded is not None and recorded != count:
            faults.append(Fault("rows", f"{name} holds {count} entries, manifest says {recorded}"))
    found = postings_faults(
        postings.indptr,
        postings.stored_rows,
        postings.stored_values,
        manifest.rows,
        manifest.k,
        axes,
        chunks=postings.chunks,
    )
    faults.extend(Fault("rows" if "expected rows·k" in f else "postings", f) for f in found)


def check_ids(path: Path, manifest: BundleManifest, intact: set[str], faults: list[str]) -> None:
    if IDS not in intact:
        return
    try:
        rows = pq.ParquetFile(path / IDS).metadata.num_rows
        ids = pq.read_table(path / IDS, columns=["id"]).column("id")
    except (OSError, ValueError, KeyError) as exc:  # pyarrow's errors derive from these
        faults.append(Fault("ids", f"{IDS}: unreadable ({' '.join(str(exc).split())[:120]})"))
        return
    recorded = manifest.files[IDS].rows
    for count in {rows, len(ids)}:
        if count != manifest.rows:
            faults.append(Fault("rows", f"{IDS} holds {count} rows, manifest says {manifest.rows}"))
    if recorded is not None and recorded != manifest.rows:
        faults.append(
            Fault("rows", f"{IDS}: manifest lists {recorded} rows, bundle {manifest.rows}")
        )
    if ids.null_count:
        faults.append(Fault("ids", f"{IDS}: {ids.null_count} rows without an id"))
    if pc.count_distinct(ids).as_py() != len(ids) - ids.null_count:
        faults.append(Fault("ids", f"{IDS}: ids are not unique"))


def check_servable(
    path: Path, sample: int = 0, consistency: int = CONSISTENCY_SAMPLE
) -> VerifyReport:
    """`verify_bundle` (by default without the source-cache sample): what a version must pass
    before it is made current or served; `VersionRefusedError` (its first fault's file named)
    when it fails."""
    report = verify_bundle(Path(path), sample=sample, consistency=consistency)
    if report.faults:
        raise VersionRefusedError(Path(path), report.faults)
    return report


def check_artifacts(
    path: Path, manifest: BundleManifest, intact: set[str], faults: list[str]
) -> dict[str, TransformArtifact] | None:
    loaded = {}
    for role, source in manifest.artifacts.items():
        names = [f"{source.copy}/{ARTIFACT_MANIFEST}", f"{source.copy}/{ARTIFACT_WEIGHTS}"]
        if not all(n in intact for n in names):
            continue
        try:
            artifact = TransformArtifact.load(path / source.copy)
        except InputError as exc:
            faults.append(Fault("artifact", f"{source.copy}: {exc}"))
            continue
        for name, digest in zip(
            names, (source.manifest_sha256, source.weights_sha256), strict=True
        ):
            if manifest.files[name].sha256 != digest:  # read and checked by check_files
                faults.append(
                    Fault("artifact", f"{name}: not the {role} artifact the bundle was built from")
                )
        if artifact.dim != manifest.dim:
            faults.append(
                Fault("artifact", f"{source.copy}: {artifact.dim}-d, bundle is {manifest.dim}-d")
            )
            continue
        loaded[role] = artifact
    grasp, cedar = loaded.get("grasp"), loaded.get("cedar")
    if grasp is not None:
        contract = {g.value: n for g, n in grasp.contract.items()}
        if contract != manifest.contract:
            faults.append(
                Fault(
                    "manifest",
                    f"{MANIFEST}: contract {manifest.contract} ≠ the GraSP copy's {contract}",
                )
            )
        if sorted(manifest.contract.values()) != sorted(p.length for p in manifest.prefixes):
            faults.append(Fault("manifest", f"{MANIFEST}: prefixes do not match the contract"))
    if cedar is not None:
        try:
            coder = ConceptCoder(cedar)
        except InputError as exc:
            faults.append(Fault("artifact", f"{manifest.artifacts['cedar'].copy}: {exc}"))
            return None
        if coder.k != manifest.k:
            faults.append(
                Fault("manifest", f"{MANIFEST}: k = {manifest.k}, the CEDAR copy's k = {coder.k}")
            )
    return loaded if grasp is not None and cedar is not None else None


def resolve_version(path: Path) -> Path:
    """A version folder, or the version CURRENT names in a bundle directory."""
    path = Path(path).expanduser()
    if (path / MANIFEST).is_file():
        return path
    if (path / CURRENT).is_file():
        name = read_current(path)
        return path / name if name else path
    if not path.exists():
        raise BundleError(f"bundle not found: {path}")
    raise BundleError(f"{path} is neither a bundle directory (with CURRENT) nor a version")
