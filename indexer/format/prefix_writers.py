"""Writing one FAISS index per prefix length, shard by shard (reading it:
indexer/format/prefix_index.py).

Three writers, one per storage, all fed p_L rows of consecutive gallery rows (row position =
FAISS id) and all leaving fsynced files behind, each created new (`HashedFile`, `create_new`:
a writer pointed at an existing file fails rather than truncate one a server may have mapped):

- `FlatFileWriter` (factory "Flat"): streams the rows straight into the file FAISS's
  `write_index` would produce for an IndexFlatIP (header, then the float32 rows), so a Flat
  index of any size is built with one shard in RAM. The header's layout is not assumed: it is
  learned from `faiss.serialize_index` of two tiny indexes and checked against a third; if the
  check fails (another FAISS build), the writer falls back to an in-RAM IndexFlatIP.
- `MemoryIndexWriter` (HNSW, IVF with lists in RAM, any override): `index.add` per shard, one
  `faiss.write_index` at the end (`write_index_file`: hashed on the way). The whole index is in
  RAM while it is built.
- `OnDiskIvfWriter` (IVF with lists on disk): each shard is added to a copy of the trained,
  empty index and written as a part file; at the end the parts are merged into one
  `prefix_{L}.ivfdata` (FAISS OnDiskInvertedLists; `merge_into_ondisk` does what
  `faiss.contrib.ondisk.merge_ondisk` does, reading the parts memory-mapped, and also takes
  lists already open — an incremental add merges the previous version's lists first). In RAM:
  the coarse centroids, the PQ tables, one shard.

Training (IVF/PQ) runs on the GPU when this FAISS build has one (the coarse k-means through a
GPU flat index); everything else, and every machine without a GPU, runs on the CPU.
"""

from __future__ import annotations

import functools
import logging
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import faiss
import numpy as np

from indexer.format.index_plan import QUANTIZER_EF, IndexTypeError, PrefixPlan, new_index
from indexer.format.prefix_index import quiet_stdout
from indexer.format.served_index import mapped
from training.core.files import HashedFile, create_new, fsync_file

log = logging.getLogger(__name__)
# merge_ondisk logs every part file it reads at INFO; one line per shard and prefix is noise
logging.getLogger("faiss.contrib.ondisk").setLevel(logging.WARNING)


FLOAT_BYTES = 4


class PrefixIndexWriter(Protocol):
    """Takes the p_L rows of consecutive gallery rows, then writes its files and fsyncs them."""

    plan: PrefixPlan

    def add(self, vectors: np.ndarray) -> None: ...

    def close(self) -> dict[Path, str | None]:
        """Write, fsync; every file written → its sha256 when computed on the way, else None."""
        ...


# --- Flat, streamed -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlatLayout:
    """The header of an IndexFlatIP file as a template, with the two int64 fields that count
    rows (ntotal, and the length of the code vector) at known offsets, each = per_row · n."""

    template: bytes
    fields: tuple[tuple[int, int], ...]  # (offset of a little-endian int64, value per row)

    def header(self, rows: int) -> bytes:
        header = bytearray(self.template)
        for offset, per_row in self.fields:
            header[offset : offset + 8] = struct.pack("<q", per_row * rows)
        return bytes(header)


def _serialised_flat(dim: int, rows: int) -> bytes:
    index = faiss.IndexFlatIP(dim)
    if rows:
        index.add(np.arange(rows * dim, dtype=np.float32).reshape(rows, dim) + 1)
    return bytes(faiss.serialize_index(index))


@functools.cache
def flat_layout(dim: int) -> FlatLayout | None:
    """The header layout, taken from FAISS itself and checked.

    The file of an empty IndexFlatIP is exactly the header with n = 0: fourcc, d (int32), ntotal
    (int64, offset 8), ..., and last the length of the code vector (int64) that the float32 rows
    follow. The per-row value of that length is read from a one-row file; the template is then
    checked byte for byte against FAISS's own files of 2, 3 and 257 rows, and None (build in
    RAM) is returned if any differs."""
    template = _serialised_flat(dim, 0)
    one = _serialised_flat(dim, 1)
    size_at = len(template) - 8
    if len(one) != len(template) + dim * FLOAT_BYTES:
        return None
    layout = FlatLayout(template, ((8, 1), (size_at, struct.unpack_from("<q", one, size_at)[0])))
    for rows in (1, 2, 3, 257):
        blob = _serialised_flat(dim, rows)
        if blob[: len(template)] != layout.header(rows):
            log.warning("unrecognised IndexFlat file layout; Flat indexes will be built in RAM")
            return None
    return layout


class FlatFileWriter:
    """Streams p_L rows into an IndexFlatIP file: header(n) first (n known from the cache
    manifest), then each shard's rows; sha256 computed on the way."""

    def __init__(self, plan: PrefixPlan, path: Path, rows: int, layout: FlatLayout) -> None:
        self.plan, self.path, self.expected = plan, path, rows
        self.written = 0
        self._file = HashedFile(path)
        self._file.write(layout.header(rows))

    def add(self, vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype="<f4")
        if vectors.ndim != 2 or vectors.shape[1] != self.plan.length:
            raise ValueError(f"expected [n, {self.plan.length}] rows, got {vectors.shape}")
        self._file.write(memoryview(vectors).cast("B"))
        self.written += len(vectors)

    def close(self) -> dict[Path, str | None]:
        digest = self._file.close()
        if self.written != self.expected:
            raise RuntimeError(
                f"{self.path.name}: wrote {self.written} rows, expected {self.expected}"
            )
        return {self.path: digest}


# --- in RAM, and IVF on disk ----------------------------------------------------------------------


class MemoryIndexWriter:
    """`index.add` per shard into a (trained) index held in RAM; `write_index` at the end."""

    def __init__(self, plan: PrefixPlan, path: Path, index: faiss.Index) -> None:
        self.plan, self.path, self.index = plan, path, index

    def add(self, vectors: np.ndarray) -> None:
        self.index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def close(self) -> dict[Path, str | None]:
        digest = write_index_file(self.index, self.path)
        self.index = None
        return {self.path: digest}


def write_index_file(index: faiss.Index, path: Path) -> str:
    """`faiss.write_index` into a new file (created exclusively, never over an existing one),
    fsynced; its sha256, computed from the bytes as FAISS hands them over."""
    file = HashedFile(path)
    faiss.write_index(index, faiss.PyCallbackIOWriter(file.write))
    return file.close()


class OnDiskIvfWriter:
    """IVF whose inverted lists live in `prefix_{L}.ivfdata`: one part file per shard, merged
    at the end (bounded RAM: one shard's codes).

    With `base` (an IVF index of the same structure holding rows 0 .. n−1, e.g. a previous
    version's, opened with its lists on disk), its lists are merged in before the parts and the
    rows added get ids n, n + 1, ... (an incremental add)."""

    def __init__(
        self,
        plan: PrefixPlan,
        path: Path,
        trained: faiss.Index,
        work: Path,
        base: faiss.Index | None = None,
    ) -> None:
        if faiss.try_extract_index_ivf(trained) is None:
            raise IndexTypeError(f"prefix {plan.length}: on-disk lists need an IVF index")
        self.plan, self.path, self.trained, self.work = plan, path, trained, work
        self.base = base
        self.parts: list[Path] = []
        self.rows = 0 if base is None else base.ntotal

    @property
    def data_path(self) -> Path:
        return self.path.with_suffix(".ivfdata")

    def add(self, vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        part = faiss.clone_index(self.trained)
        part.add_with_ids(vectors, np.arange(self.rows, self.rows + len(vectors), dtype=np.int64))
        path = self.work / f"{self.path.stem}.part-{len(self.parts):05d}.faiss"
        faiss.write_index(part, str(path))
        self.parts.append(path)
        self.rows += len(vectors)

    def close(self) -> dict[Path, str | None]:
        index = self.trained
        parts = [faiss.read_index(str(p), faiss.IO_FLAG_MMAP) for p in self.parts]
        sources = [faiss.extract_index_ivf(i).invlists for i in [self.base, *parts] if i]
        merge_into_ondisk(index, sources, self.data_path)
        digest = write_index_file(index, self.path)
        del index, parts, sources
        self.trained = self.base = None
        for part in self.parts:
            part.unlink()
        fsync_file(self.data_path)
        return {self.path: digest, self.data_path: None}


def merge_into_ondisk(
    index: faiss.Index, sources: list[faiss.InvertedLists], data_path: Path
) -> None:
    """Give a trained, empty IVF index on-disk inverted lists in a new file `data_path`
    (FileExistsError when it exists) holding the entries of `sources`, list by list in the
    order given (ids as stored in the sources). The sources stay owned by their indexes: keep
    those alive until this returns."""
    ivf = faiss.extract_index_ivf(index)
    if index.ntotal != 0:
        raise ValueError("merge_into_ondisk needs an empty index")
    create_new(data_path)  # FAISS opens it by name, truncating whatever is there
    lists = faiss.OnDiskInvertedLists(ivf.nlist, ivf.code_size, str(data_path))
    pointers = faiss.InvertedListsPtrVector()
    for source in sources:
        pointers.push_back(source)
    with quiet_stdout():
        total = lists.merge_from_multiple(pointers.data(), pointers.size(), False)
    index.ntotal = ivf.ntotal = total
    ivf.replace_invlists(lists, True)
    lists.this.disown()


def empty_copy(index: faiss.Index) -> faiss.Index:
    """The trained, empty version of an IVF index read from a file (its lists replaced by
    empty in-RAM lists): what the index was right after training."""
    ivf = faiss.extract_index_ivf(index)
    lists = faiss.ArrayInvertedLists(ivf.nlist, ivf.code_size)
    ivf.replace_invlists(lists, True)
    lists.this.disown()
    index.ntotal = ivf.ntotal = 0
    return index


def flat_file_rows(path: Path, length: int) -> np.ndarray | None:
    """The float32 rows [n, L] of an IndexFlatIP file laid out as `FlatFileWriter` (and
    FAISS) writes it, memory-mapped read-only; None when the file is laid out otherwise."""
    layout = flat_layout(length)
    if layout is None:
        return None
    size = path.stat().st_size
    header = len(layout.template)
    rows, rest = divmod(size - header, length * FLOAT_BYTES)
    if rows < 0 or rest:
        return None
    with path.open("rb") as handle:
        if handle.read(header) != layout.header(rows):
            return None
    if rows == 0:
        return np.zeros((0, length), dtype=np.float32)
    return np.memmap(path, dtype="<f4", mode="r", offset=header, shape=(rows, length))


def open_writer(
    plan: PrefixPlan, folder: Path, rows: int, work: Path, trained: faiss.Index | None = None
) -> PrefixIndexWriter:
    """The writer a plan calls for; `trained` is the trained empty index where one is needed."""
    path = folder / plan.file
    if plan.ondisk:
        return OnDiskIvfWriter(plan, path, trained or new_index(plan.factory, plan.length), work)
    if plan.factory == "Flat" and (layout := flat_layout(plan.length)) is not None:
        return FlatFileWriter(plan, path, rows, layout)
    return MemoryIndexWriter(plan, path, trained or new_index(plan.factory, plan.length))


# --- training -------------------------------------------------------------------------------------


def gpu_available() -> bool:
    """True when this FAISS build has GPU support and sees a GPU."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def train_index(plan: PrefixPlan, sample: np.ndarray) -> faiss.Index:
    """A trained, empty index for the plan, trained on p_L rows (IndexTypeError if FAISS says
    the sample cannot train it, e.g. fewer rows than centroids)."""
    index = new_index(plan.factory, plan.length)
    if index.is_trained:
        return index
    served = mapped(index)
    ivf = served.ivf
    graph = None if served.coarse is None else served.coarse.graph  # a graph quantizer
    if ivf is not None and (graph is not None or gpu_available()):
        # k-means assigns through a flat index (the GPU's where there is one), not the graph
        flat = faiss.IndexFlatIP(ivf.d) if ivf.metric_type == faiss.METRIC_INNER_PRODUCT else None
        flat = flat or faiss.IndexFlatL2(ivf.d)
        if gpu_available():
            flat = faiss.index_cpu_to_all_gpus(flat)
            log.info("prefix %d: training the coarse quantizer on the GPU", plan.length)
        ivf.clustering_index = flat
    try:
        index.train(np.ascontiguousarray(sample, dtype=np.float32))
    except RuntimeError as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else "unknown"
        raise IndexTypeError(
            f"prefix {plan.length}: cannot train {plan.factory!r} on {len(sample)} rows: {reason}"
        ) from None
    if ivf is not None:
        ivf.clustering_index = None
    if graph is not None:  # written with the index: every reader searches the graph so
        graph.hnsw.efSearch = QUANTIZER_EF
    return index
