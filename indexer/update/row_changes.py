"""What an add or a delete may change: the refusals, and which rows it keeps (pure but for
reading a cache's ids, an id file or the bundle directory's CURRENT).

Either needs a published version to start from (`open_base`), and one that verifies: the
base is held to `indexer.verify.check.check_servable`, as `strata index publish` and a hot swap hold
a version, so a damaged base is refused in one line naming its file (VersionRefusedError)
before anything is read from it or written. An add needs a cache of the
bundle's encoder, dimension and modality whose ids are all new and none repeated; a delete
needs known ids (unless --missing-ok), something to delete, and a row left. `rows_to_delete`
gives the renumbering: row r becomes r − the deleted rows before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexer.format.bundle import Bundle
from indexer.verify.check import check_servable
from indexer.versions.bundle_store import BundleStore
from training.core.cache import EmbeddingCache
from training.core.errors import InputError

SHOWN_IDS = 5  # ids named in an error message


class UpdateError(InputError):
    """An add or delete the bundle cannot take (named inputs)."""


def shown(ids: Sequence[str]) -> str:
    """A few ids for a message: `a, b, c, … (12 in all)`."""
    head = ", ".join(repr(i) for i in ids[:SHOWN_IDS])
    return head if len(ids) <= SHOWN_IDS else f"{head}, … ({len(ids)} in all)"


def check_new_ids(base_ids: pa.Array, new_ids: pa.Array, base: str, cache: Path) -> None:
    """Refuse ids the cache repeats, lacks, or that the bundle already holds."""
    if new_ids.null_count:
        raise UpdateError(f"{new_ids.null_count} rows of the cache {cache} have no id")
    counts = pc.value_counts(new_ids)
    repeated = [
        v.as_py()
        for v, n in zip(counts.field("values"), counts.field("counts"), strict=True)
        if n.as_py() > 1
    ]
    if repeated:
        raise UpdateError(f"the cache {cache} repeats ids: {shown(repeated)}")
    present = new_ids.filter(pc.is_in(new_ids, value_set=base_ids)).to_pylist()
    if present:
        raise UpdateError(
            f"{len(present)} ids of the cache {cache} are already in {base}: {shown(present)} "
            "(an add appends new rows; delete these first to replace them)"
        )


def rows_to_delete(
    base_ids: pa.Array, ids: Sequence[str], missing_ok: bool, base: str
) -> tuple[np.ndarray, list[str]]:
    """(new_row: int64 [N], the new position of each row, −1 where deleted; the ids given that
    the bundle lacks). Refuses unknown ids (unless missing_ok), nothing to delete, everything."""
    wanted = pa.array(sorted(set(ids)), type=pa.string())
    if len(wanted) == 0:
        raise UpdateError("no ids to delete: give --id ID (repeatable) or --ids FILE")
    missing = wanted.filter(pc.invert(pc.is_in(wanted, value_set=base_ids))).to_pylist()
    if missing and not missing_ok:
        raise UpdateError(
            f"{len(missing)} of the {len(wanted)} ids to delete are not in {base}: "
            f"{shown(missing)} (--missing-ok skips them)"
        )
    deleted = pc.is_in(base_ids, value_set=wanted).to_numpy(zero_copy_only=False)
    if not deleted.any():
        raise UpdateError(f"none of the {len(wanted)} ids are in {base}: nothing to delete")
    if deleted.all():
        raise UpdateError(f"deleting every row of {base} would leave an empty bundle")
    new_row = np.where(deleted, -1, np.cumsum(~deleted) - 1).astype(np.int64)
    return new_row, missing


def read_id_file(path: Path) -> list[str]:
    """Ids to delete, one a line (surrounding blanks stripped, empty lines skipped)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UpdateError(f"cannot read --ids {path}: {exc.strerror}") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def check_addable(base: Bundle, cache: EmbeddingCache) -> None:
    modality = base.manifest.modality
    if cache.rows == 0:
        raise UpdateError(f"the embedding cache {cache.root} holds no rows")
    if cache.dim != base.dim:
        raise UpdateError(
            f"dimension mismatch: {base.name} holds {base.dim}-d rows, the cache {cache.root} "
            f"{cache.dim}-d embeddings"
        )
    encoder, ours = cache.manifest.encoder, base.manifest.encoder
    if encoder and ours and encoder != ours:
        raise UpdateError(
            f"encoder mismatch: {base.name} was built from {ours!r} embeddings, the cache "
            f"{cache.root} holds {encoder!r} ones"
        )
    if modality not in cache.modalities:
        raise UpdateError(
            f"the cache {cache.root} has no {modality} embeddings ({', '.join(cache.modalities)}),"
            f" the modality of {base.name}"
        )


def cache_ids(cache: EmbeddingCache) -> pa.Array:
    """Every id of a cache, in row order (the metadata read shard by shard)."""
    arrays = [
        data.metadata.column("id").cast(pa.string()).combine_chunks()
        for data in cache.iter_shards()
    ]
    return pa.concat_arrays(arrays) if arrays else pa.array([], pa.string())


def open_base(store: BundleStore) -> Bundle:
    """The published version, verified (`check_servable`; call with the lock held, so that it
    stays the base)."""
    if not store.root.is_dir():
        raise UpdateError(f"bundle directory not found: {store.root}")
    name = store.current()
    if name is None:
        raise UpdateError(
            f"{store.root} has no published bundle (no CURRENT) to change; "
            "make one with `strata index build`"
        )
    check_servable(store.root / name)
    return Bundle.open_version(store.root / name)
