"""The bundle's row table `ids.parquet`: the cache's `id` column and its metadata, in row order.

Row r of the table is gallery row r, the FAISS id in every prefix index and the row id in the
postings. The schema is the union of the shards' metadata schemas (`id` first, a column a shard
lacks is null there), fixed before the first row is written so the file streams shard by shard.
An incremental add or delete copies a base's row groups (`copy_ids`), all or the kept rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from training.core.errors import CacheError
from training.core.files import create_new

IDS = "ids.parquet"


def unified_schema(schemas: Iterable[pa.Schema]) -> pa.Schema:
    """The union of the shards' schemas, `id` (string) first."""
    try:
        merged = pa.unify_schemas(list(schemas), promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise CacheError(f"the cache's metadata shards have incompatible schemas: {exc}") from exc
    fields = [f for f in merged if f.name != "id"]
    return pa.schema([pa.field("id", pa.string()), *fields])


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with the schema's columns in its order (null where missing), cast to its types."""
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


class IdsWriter:
    """Streams each shard's metadata into `ids.parquet` (one row group per shard)."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path, self.schema, self.rows = path, schema, 0
        self._writer = pq.ParquetWriter(create_new(path), schema)  # never over an existing file

    def add(self, metadata: pa.Table) -> None:
        try:
            table = conform(metadata, self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise CacheError(
                f"metadata rows {self.rows}..: cannot conform to {self.schema}"
            ) from exc
        self._writer.write_table(table)
        self.rows += table.num_rows

    def close(self) -> dict[Path, str | None]:
        self._writer.close()
        with self.path.open("rb") as handle:
            os.fsync(handle.fileno())
        return {self.path: None}


def copy_ids(path: Path, writer: IdsWriter, keep: np.ndarray | None = None) -> int:
    """Append the rows of an existing ids.parquet to `writer`, row group by row group (bounded
    memory; the groups stay as they were), only those where `keep` is True when given.
    Returns the rows copied."""
    source = pq.ParquetFile(path)
    start = copied = 0
    for group in range(source.num_row_groups):
        table = source.read_row_group(group)
        stop = start + table.num_rows
        if keep is not None:
            table = table.filter(pa.array(keep[start:stop]))
        start = stop
        if table.num_rows:
            writer.add(table)
            copied += table.num_rows
    return copied


def read_ids(path: Path) -> pa.Array:
    """The id column of a bundle, in row order (memory-mapped read)."""
    return pq.read_table(path, columns=["id"], memory_map=True).column("id").combine_chunks()
