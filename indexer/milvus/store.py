"""A bundle version in Milvus: `strata index export --to milvus://host:19530 | ./file.db`.

pymilvus talks to a Milvus cluster (`milvus://host:19530`, or `http(s)://…`) and to Milvus Lite
(a local `.db` folder, started in-process) with the same client code, so what the tests run on
Milvus Lite runs unchanged against a cluster.

Layout. Each bundle version is one collection, `{name}__v000007`, and the alias `{name}` names
the published one:

    row             INT64 primary key: the bundle row (FAISS id = row position, as locally)
    item_id         VARCHAR: the cache id of the row (ids.parquet's `id`)
    <metadata>      one scalar field per ids.parquet column (VARCHAR, INT64, DOUBLE, BOOL;
                    timestamps and dates as ISO text), nullable
    concepts        ARRAY<INT64>: the row's active CEDAR concept ids, strongest first
    activations     ARRAY<FLOAT>: their activations, same order (Explain reads them)
    p{L}            FLOAT_VECTOR[L], one per prefix length of the contract: p_L(x), the
                    renormalised first L rotated coordinates, inner product (= cosine)

One vector field per prefix, in one collection, rather than a collection per prefix: a version
is then one collection, so one alias switch publishes every prefix of it at once (collections
per prefix would need one alias each, switched one after the other — not atomic), a filter or
a row read is one call, and the rows' scalar fields are stored once. Milvus allows several
vector fields per collection (`proxy.maxVectorFieldNum`, 4 by default on a cluster before 2.5:
deploy/k8s/milvus sets it to the contract's five; Milvus Lite has no such cap).

The vectors are the ones the bundle stores: read from the exact storage of the smallest prefix
M ≥ L whose index keeps them (Flat, HNSW's storage, a refine's Flat), p_L = p_L(p_M); a bundle
whose indexes keep no exact rows cannot be exported. Each field gets the index kind of its
prefix (Flat → FLAT, HNSW → HNSW with its M and efConstruction, anything else → HNSW).

The collection's property `strata.export` records the version it holds (bundle name, version,
rows, prefixes, the manifest's sha256, metadata fields), so a replica opens the matching
version folder and checks it is the one exported.

Publishing is atomic and zero-downtime: the rows are inserted, flushed, indexed, loaded and
counted first; only then does the alias move (`alter_alias`, the engine's own re-index switch).
The collection it left is marked retired (`strata.retired_at`, a collection property) and
dropped by a later export or `strata index export --drop-retired` once `grace_s` has passed, so
a replica still searching it by name (until it follows the alias) keeps its answers.

Every call carries a deadline (`timeout_s`); an engine that does not answer raises
`EngineUnavailable` with the URI and what failed, never hangs.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.core.errors import InputError

log = logging.getLogger(__name__)

EXPORT_FORMAT = "strata.milvus-export/1"
DEFAULT_NAME = "strata"
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_GRACE_S = 300.0
INSERT_ROWS = 2000  # rows per insert call (a gRPC message stays well under Milvus's 64 MB)
RETIRED = "strata.retired_at"
RECORD = (
    "strata.export"  # a collection property: the ExportRecord (Milvus Lite keeps no description)
)
ROW, ITEM_ID, CONCEPTS, ACTIVATIONS = "row", "item_id", "concepts", "activations"
RESERVED = frozenset({ROW, ITEM_ID, CONCEPTS, ACTIVATIONS})
VARCHAR_MAX = 65_535
ENGINE_LOGGERS = ("pymilvus", "milvus_lite")
ARRAY_CAPACITY_MAX = 4096  # Milvus's cap on an ARRAY field's max_capacity


class EngineUnavailable(InputError):  # noqa: N818 (the service maps it to UNAVAILABLE)
    """The vector engine did not answer within the deadline, or refused the connection."""


class ExportError(InputError):
    """A bundle or a collection that cannot be exported or served as asked."""


def vector_field(length: int) -> str:
    return f"p{length}"


def collection_name(name: str, version: int) -> str:
    return f"{name}__v{version:06d}"


def client_uri(target: str) -> str:
    """pymilvus's URI for `milvus://host:port` (http), `milvuss://…` (https), an http(s) URI,
    or a Milvus Lite path (`./file.db`, kept as it is)."""
    target = target.strip()
    if target.startswith("milvus://"):
        return "http://" + target.removeprefix("milvus://")
    if target.startswith("milvuss://"):
        return "https://" + target.removeprefix("milvuss://")
    if target.startswith(("http://", "https://", "unix:")):
        return target
    if target.endswith(".db"):
        return str(Path(target).expanduser().absolute())
    raise ExportError(
        f"not a Milvus target: {target!r} (milvus://host:19530, https://…, or a Milvus Lite "
        "path ending in .db)"
    )


def is_milvus_target(target: str) -> bool:
    try:
        client_uri(target)
    except ExportError:
        return False
    return True


@dataclass(frozen=True)
class ExportRecord:
    """What a collection's description records of the bundle version it holds."""

    bundle: str
    version: int
    rows: int
    prefixes: tuple[int, ...]
    manifest_sha256: str
    metadata_fields: tuple[str, ...]

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": EXPORT_FORMAT,
                "bundle": self.bundle,
                "version": self.version,
                "rows": self.rows,
                "prefixes": list(self.prefixes),
                "manifest_sha256": self.manifest_sha256,
                "metadata_fields": list(self.metadata_fields),
            }
        )

    @classmethod
    def from_json(cls, text: str, collection: str) -> ExportRecord:
        try:
            data = json.loads(text)
            if data.get("format") != EXPORT_FORMAT:
                raise ValueError(f"format {data.get('format')!r}")
            return cls(
                data["bundle"],
                int(data["version"]),
                int(data["rows"]),
                tuple(int(p) for p in data["prefixes"]),
                data["manifest_sha256"],
                tuple(data["metadata_fields"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ExportError(f"collection {collection} is not a Strata export ({exc})") from None


def _rpc_details(exc: BaseException) -> str | None:
    """A grpc error's code and details ("DEADLINE_EXCEEDED: Deadline Exceeded"), else None."""
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if not (callable(code) and callable(details)):
        return None
    return f"{getattr(code(), 'name', code())}: {details()}"


class UnimplementedCalls(logging.Filter):
    """Drops grpc's server-side ERROR record of a call Milvus Lite does not implement (pymilvus
    asks for `AllocTimestamp` while waiting for an index and carries on without it); Milvus
    Lite's gRPC server runs in this process when the target is a `.db` path."""

    quiet = True

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (self.quiet and isinstance(error, NotImplementedError))


_UNIMPLEMENTED = UnimplementedCalls()


def quiet_engine_logs(quiet: bool = True) -> None:
    """pymilvus and Milvus Lite log every failed call at ERROR with its traceback, before the
    exception that `MilvusStore.call` turns into one line: silenced unless `quiet` is False
    (`strata index export --verbose`, or STRATA_LOG_LEVEL=DEBUG)."""
    loud = not quiet or log.isEnabledFor(logging.DEBUG)
    _UNIMPLEMENTED.quiet = not loud
    for name in ENGINE_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING if loud else logging.CRITICAL + 1)
    server = logging.getLogger("grpc._server")
    if _UNIMPLEMENTED not in server.filters:
        server.addFilter(_UNIMPLEMENTED)


class LocalEngine:
    """Milvus Lite's gRPC server over one `.db` folder, in this process, owned by one store.

    The store starts it rather than letting pymilvus start it on a `.db` URI, so that closing
    the store stops it and waits: pymilvus's own server outlives the store until the
    interpreter exits, and a call whose deadline had passed could reach it then and print its
    thread's traceback beneath the one error line. Milvus Lite locks the folder, so one store
    per folder per process (serving shares its store with the alias follower)."""

    def __init__(self, folder: Path) -> None:
        from milvus_lite.adapter.grpc.server import start_server_in_thread
        from milvus_lite.exceptions import MilvusLiteError

        if not folder.parent.is_dir():
            raise EngineUnavailable(f"vector engine {folder} unavailable: no {folder.parent}")
        try:
            self.server, self.db, port = start_server_in_thread(str(folder), "127.0.0.1", 0)
        except (OSError, MilvusLiteError) as exc:  # the folder locked by another process, …
            raise EngineUnavailable(f"vector engine {folder} unavailable: {exc}") from None
        self.uri = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        """Cancel what is in flight and wait until the server has stopped; then the folder."""
        self.server.stop(grace=None)
        self.db.close()


class MilvusStore:
    """One connection to a Milvus engine, every call with a deadline (`EngineUnavailable`)."""

    def __init__(
        self, target: str, timeout_s: float = DEFAULT_TIMEOUT_S, verbose: bool = False
    ) -> None:
        import grpc
        from pymilvus import MilvusClient
        from pymilvus.exceptions import MilvusException

        quiet_engine_logs(not verbose)
        self.target, self.uri, self.timeout_s = target, client_uri(target), timeout_s
        self._errors: tuple[type[BaseException], ...] = (
            MilvusException,
            ConnectionError,
            grpc.RpcError,  # a deadline passed: grpc's own
        )
        self._local: LocalEngine | None = None
        if self.uri.endswith(".db"):
            self._local = LocalEngine(Path(self.uri))
            self.uri = self._local.uri
        try:
            # its own connection: pymilvus shares one per URI otherwise, and a store would
            # inherit a dead one left by an engine that stopped on the same address
            self.client = MilvusClient(uri=self.uri, timeout=timeout_s, dedicated=True)
        except self._errors as exc:
            self.close_engine()
            raise self.unavailable("connecting", exc) from None

    def unavailable(self, doing: str, exc: BaseException) -> EngineUnavailable:
        message = getattr(exc, "message", None) or _rpc_details(exc) or str(exc)
        return EngineUnavailable(
            f"vector engine {self.target} unavailable ({doing}): {message.splitlines()[0][:300]}"
        )

    def call(
        self,
        doing: str,
        method: Callable[..., Any],
        *args: Any,
        deadline_s: float | None = None,
        **kwargs: Any,
    ) -> Any:
        """`method(*args, timeout=…)` with the store's deadline (or `deadline_s`, for work no
        request waits on); an engine fault becomes EngineUnavailable. A collection the engine
        released (Milvus Lite after a restart) is loaded again, once."""
        timeout = self.timeout_s if deadline_s is None else deadline_s
        for attempt in (0, 1):
            try:
                return method(*args, timeout=timeout, **kwargs)
            except self._errors as exc:
                message = str(getattr(exc, "message", exc))
                name = kwargs.get("collection_name") or (args[0] if args else None)
                if attempt == 0 and "load" in message and isinstance(name, str):
                    try:
                        self.client.load_collection(name, timeout=self.timeout_s)
                        continue
                    except self._errors:
                        pass
                raise self.unavailable(doing, exc) from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the connection, and stop a `.db` target's engine."""
        self.client.close()
        self.close_engine()

    def close_engine(self) -> None:
        if self._local is not None:
            self._local.stop()
            self._local = None

    def drop_quietly(self, collection: str) -> None:
        """Drop a collection an export failed to finish, if the engine answers (the failure
        that stopped the export is the one reported)."""
        try:
            self.client.drop_collection(collection, timeout=self.timeout_s)
        except Exception as exc:  # best effort: the export's own error follows
            log.debug("dropping %s after a failed export: %s", collection, exc)

    # --- the alias and the versions ---

    def current(self, name: str) -> str | None:
        """The collection the alias `name` names, or None when there is no such alias."""
        aliases = self.call("listing aliases", self.client.list_aliases).get("aliases", [])
        if name not in aliases:
            return None
        return self.call("reading the alias", self.client.describe_alias, name)["collection_name"]

    def record(self, collection: str) -> ExportRecord:
        found = self.call("reading a collection", self.client.describe_collection, collection)
        return ExportRecord.from_json(found.get("properties", {}).get(RECORD, ""), collection)

    def versions(self, name: str) -> list[str]:
        collections = self.call("listing collections", self.client.list_collections)
        return sorted(c for c in collections if c.startswith(f"{name}__v"))

    def publish(self, name: str, collection: str, now: float | None = None) -> str | None:
        """Point the alias `name` at `collection` (atomically); the collection it named before
        is marked retired now. Returns that previous collection, if any."""
        previous = self.current(name)
        if previous == collection:
            return None
        if previous is None:
            self.call("creating the alias", self.client.create_alias, collection, name)
            return None
        self.call("switching the alias", self.client.alter_alias, collection, name)
        stamp = str(time.time() if now is None else now)
        self.call(
            "retiring a collection",
            self.client.alter_collection_properties,
            previous,
            properties={RETIRED: stamp},
        )
        return previous

    def drop_retired(self, name: str, grace_s: float, now: float | None = None) -> list[str]:
        """Drop the versions of `name` retired more than `grace_s` seconds ago."""
        now = time.time() if now is None else now
        current, dropped = self.current(name), []
        for collection in self.versions(name):
            if collection == current:
                continue
            found = self.call("reading a collection", self.client.describe_collection, collection)
            retired = found.get("properties", {}).get(RETIRED)
            if retired is not None and now - float(retired) >= grace_s:
                self.call("dropping a collection", self.client.drop_collection, collection)
                dropped.append(collection)
        return dropped
