"""Writing a bundle version into Milvus: its rows, vectors, concepts and metadata as one
collection, then the alias switch (the layout and the publishing: indexer/milvus/store.py)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from indexer.format.bundle import Bundle
from indexer.format.manifest import MANIFEST
from indexer.format.served_index import exact_storage
from indexer.milvus.store import (
    ACTIVATIONS,
    ARRAY_CAPACITY_MAX,
    CONCEPTS,
    DEFAULT_GRACE_S,
    DEFAULT_NAME,
    INSERT_ROWS,
    ITEM_ID,
    RECORD,
    RESERVED,
    ROW,
    VARCHAR_MAX,
    ExportError,
    ExportRecord,
    MilvusStore,
    collection_name,
    vector_field,
)
from training.core.files import sha256_file
from training.core.metrics import prefix_vectors

# a call over every row (flush, index build, load) gets the deadline once per this many rows
BULK_ROWS = 100_000


def bulk_deadline(timeout_s: float, rows: int) -> float:
    """The deadline of a call whose work grows with the collection (flush, building the
    indexes, loading): the per-call deadline for every BULK_ROWS rows, at least once (Milvus
    Lite built a 1M-row collection's indexes past a flat 60 s)."""
    return timeout_s * max(1.0, rows / BULK_ROWS)


def metadata_columns(schema: pa.Schema) -> dict[str, str]:
    """ids.parquet's metadata columns → Milvus scalar kinds ("varchar", "int64", "double",
    "bool"; temporal and other columns travel as ISO / str text)."""
    kinds: dict[str, str] = {}
    for f in schema:
        if f.name == "id":
            continue
        if f.name in RESERVED or (f.name.startswith("p") and f.name[1:].isdigit()):
            raise ExportError(f"metadata column {f.name!r} clashes with a field of the export")
        if pa.types.is_boolean(f.type):
            kinds[f.name] = "bool"
        elif pa.types.is_integer(f.type):
            kinds[f.name] = "int64"
        elif pa.types.is_floating(f.type):
            kinds[f.name] = "double"
        else:
            kinds[f.name] = "varchar"
    return kinds


def row_concepts_csr(bundle: Bundle) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every row's concepts from the concept-major postings, inverted to row-major:
    (indptr [N + 1], concept ids, activations), each row's entries strongest first."""
    postings = bundle._postings
    counts = np.diff(postings.indptr)
    concepts = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    rows, values = postings.rows[:], postings.values[:]  # decoded: int64 ids, float32
    order = np.lexsort((-values, rows))
    indptr = np.zeros(bundle.rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=bundle.rows), out=indptr[1:])
    return indptr, concepts[order], values[order]


def exact_sources(bundle: Bundle) -> dict[int, tuple[int, Any]]:
    """Per prefix L: (M, exact storage of prefix M) for the smallest M ≥ L that keeps exact
    rows; ExportError naming the prefixes that have none."""
    stored = {}
    for length in bundle.prefix_lengths:
        storage = exact_storage(bundle.index(length))
        if storage is not None:
            stored[length] = storage
    sources, missing = {}, []
    for length in bundle.prefix_lengths:
        m = min((s for s in stored if s >= length), default=None)
        if m is None:
            missing.append(length)
        else:
            sources[length] = (m, stored[m])
    if missing:
        raise ExportError(
            f"bundle {bundle.name} keeps no exact rows at prefix ≥ {min(missing)} (its indexes "
            "are compressed): export needs a Flat, HNSW or refined index there"
        )
    return sources


def holds_vector_fields(release: str, fields: int) -> bool:
    """Whether a Milvus of this release (as `get_server_version` gives it: "v2.4.5",
    "v2.3.5-lite", "milvus_lite-3.2.2") holds `fields` vector fields in one collection: one
    before 2.4; Milvus Lite, and a release this cannot read, are taken to."""
    found = re.match(r"v?(\d+)\.(\d+)", release.strip())
    return fields <= 1 or found is None or (int(found[1]), int(found[2])) >= (2, 4)


def index_params_for(factory: str) -> tuple[str, dict[str, Any]]:
    """The Milvus index of a prefix whose local index is `factory`."""
    if factory.strip().lower() == "flat":
        return "FLAT", {}
    if factory.strip().upper() == "HNSW":
        return "HNSW", {"M": 32, "efConstruction": 200}
    if factory.startswith("HNSW"):
        m = factory.removeprefix("HNSW").split(",")[0].split("_")[0]
        return "HNSW", {"M": int(m) if m.isdigit() else 32, "efConstruction": 200}
    return "HNSW", {"M": 32, "efConstruction": 200}


def row_batches(
    bundle: Bundle,
    rows_per_batch: int = INSERT_ROWS,
    concepts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> Iterator[list[dict]]:
    """The export's rows, in insert batches (see the module docstring for the fields);
    `concepts`: `row_concepts_csr(bundle)` if already read."""
    sources = exact_sources(bundle)
    indptr, concept_ids, activations = concepts or row_concepts_csr(bundle)
    table = bundle._table
    kinds = metadata_columns(table.schema)
    for start in range(0, bundle.rows, rows_per_batch):
        stop = min(start + rows_per_batch, bundle.rows)
        read: dict[int, np.ndarray] = {}
        vectors = {}
        for length, (m, storage) in sources.items():
            if m not in read:
                read[m] = storage.reconstruct_n(start, stop - start).astype(np.float32)
            vectors[length] = read[m] if m == length else prefix_vectors(read[m], length)
        part = table.slice(start, stop - start)
        ids = part.column("id").to_pylist()
        columns = {name: _scalars(part.column(name), kind) for name, kind in kinds.items()}
        batch = []
        for j in range(stop - start):
            r = start + j
            a, b = int(indptr[r]), int(indptr[r + 1])
            entry: dict[str, Any] = {
                ROW: r,
                ITEM_ID: str(ids[j]),
                CONCEPTS: concept_ids[a:b].tolist(),
                ACTIVATIONS: activations[a:b].tolist(),
            }
            for name, values in columns.items():
                entry[name] = values[j]
            for length, v in vectors.items():
                entry[vector_field(length)] = v[j]
            batch.append(entry)
        yield batch


def _scalars(column: pa.ChunkedArray, kind: str) -> list[Any]:
    values = column.to_pylist()
    if kind == "varchar":
        return [
            None if v is None else (v.isoformat() if hasattr(v, "isoformat") else str(v))
            for v in values
        ]
    return values


def concept_capacity(indptr: np.ndarray, bundle: str) -> int:
    """The `concepts` / `activations` arrays' capacity: the most concepts a row holds (its k
    axes and its active word concepts: `indptr` of `row_concepts_csr`), at least 1;
    ExportError past Milvus's cap."""
    most = max(1, int(np.diff(indptr).max(initial=0)))
    if most > ARRAY_CAPACITY_MAX:
        raise ExportError(
            f"bundle {bundle} has a row with {most} active concepts; a Milvus array holds "
            f"at most {ARRAY_CAPACITY_MAX}"
        )
    return most


def collection_schema(store: MilvusStore, bundle: Bundle, capacity: int) -> Any:
    """The version's collection (indexer/milvus/store.py's layout); `capacity`: the concept
    arrays' (`concept_capacity`)."""
    from pymilvus import DataType

    schema = store.client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field(ROW, DataType.INT64, is_primary=True)
    schema.add_field(ITEM_ID, DataType.VARCHAR, max_length=VARCHAR_MAX)
    kinds = {
        "varchar": DataType.VARCHAR,
        "int64": DataType.INT64,
        "double": DataType.DOUBLE,
        "bool": DataType.BOOL,
    }
    for name, kind in metadata_columns(bundle._table.schema).items():
        extra = {"max_length": VARCHAR_MAX} if kind == "varchar" else {}
        schema.add_field(name, kinds[kind], nullable=True, **extra)
    schema.add_field(CONCEPTS, DataType.ARRAY, element_type=DataType.INT64, max_capacity=capacity)
    schema.add_field(
        ACTIVATIONS, DataType.ARRAY, element_type=DataType.FLOAT, max_capacity=capacity
    )
    for length in bundle.prefix_lengths:
        schema.add_field(vector_field(length), DataType.FLOAT_VECTOR, dim=length)
    return schema


@dataclass
class ExportSummary:
    collection: str
    alias: str
    rows: int
    seconds: float
    published: bool
    previous: str | None
    dropped: list[str]


def export_bundle(
    bundle: Bundle,
    store: MilvusStore,
    name: str = DEFAULT_NAME,
    *,
    publish: bool = True,
    grace_s: float = DEFAULT_GRACE_S,
    rows_per_batch: int = INSERT_ROWS,
    progress: Callable[[int], None] | None = None,
    index_kind: str | None = None,
) -> ExportSummary:
    """Write `bundle` into `{name}__v{version}`, then (with `publish`) switch the alias `name`
    to it and drop versions retired over `grace_s` ago (indexer/milvus/store.py). An unpublished
    collection of the same version left by an interrupted export is replaced; the published
    one is refused. `index_kind` ("FLAT", "HNSW") overrides every prefix's index kind."""
    started = time.perf_counter()
    collection = collection_name(name, bundle.version)
    if store.current(name) == collection:
        raise ExportError(f"{collection} is already published as {name}: nothing to export")
    client = store.client
    release = store.call("reading its release", client.get_server_version)
    if not holds_vector_fields(release, len(bundle.manifest.prefixes)):
        raise ExportError(
            f"Milvus {release} at {store.target} holds one vector field a collection, and a "
            f"version is one collection with a field per prefix ({len(bundle.manifest.prefixes)}"
            "): use Milvus 2.4 or later, or Milvus Lite"
        )
    if collection in store.versions(name):
        store.call("dropping an unfinished export", client.drop_collection, collection)
    record = ExportRecord(
        bundle.name,
        bundle.version,
        bundle.rows,
        tuple(bundle.prefix_lengths),
        sha256_file(bundle.path / MANIFEST),
        tuple(metadata_columns(bundle._table.schema)),
    )
    concepts = row_concepts_csr(bundle)
    schema = collection_schema(store, bundle, concept_capacity(concepts[0], bundle.name))
    index_params = client.prepare_index_params()
    for entry in bundle.manifest.prefixes:
        kind, params = index_params_for(entry.factory if index_kind is None else index_kind)
        index_params.add_index(
            vector_field(entry.length), index_type=kind, metric_type="IP", params=params
        )
    store.call("creating a collection", client.create_collection, collection, schema=schema)
    try:
        store.call(
            "recording the version",
            client.alter_collection_properties,
            collection,
            properties={RECORD: record.to_json()},
        )
        done = 0
        for batch in row_batches(bundle, rows_per_batch, concepts):
            store.call("inserting rows", client.insert, collection, batch)
            done += len(batch)
            if progress is not None:
                progress(done)
        bulk = bulk_deadline(store.timeout_s, bundle.rows)
        store.call("flushing", client.flush, collection, deadline_s=bulk)
        store.call(
            "building the indexes",
            client.create_index,
            collection,
            index_params,
            deadline_s=bulk,
        )
        store.call("loading", client.load_collection, collection, deadline_s=bulk)
        counted = store.call(
            "counting rows", client.query, collection, filter="", output_fields=["count(*)"]
        )[0]["count(*)"]
        if int(counted) != bundle.rows:
            raise ExportError(f"{collection} holds {counted} rows, the bundle {bundle.rows}")
    except BaseException:  # nothing half-written stays: the alias never saw it
        store.drop_quietly(collection)
        raise
    previous, dropped = None, []
    if publish:
        previous = store.publish(name, collection)
        dropped = store.drop_retired(name, grace_s)
    return ExportSummary(
        collection, name, bundle.rows, time.perf_counter() - started, publish, previous, dropped
    )
