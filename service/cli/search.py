"""`strata serve` (the gRPC server) and `strata search` (a query against a running server)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import socket
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from service.api.grpc.client import StrataClient
from service.results import (
    AUTO,
    GRANULARITY_CHOICES,
    PLAN_KINDS,
    SearchPlan,
    SearchResult,
    concept_text,
)
from service.serving.batching import BatchingConfig
from training.core.config import build_config
from training.core.errors import InputError
from training.core.settings import StrataSettings, load_settings

DEFAULT_TARGET = "127.0.0.1:50051"
TEXT_WIDTH = 60
ADMIN_TOKEN_ENV = "STRATA_ADMIN_TOKEN"


def read_admin_token(path: Path | None, settings: StrataSettings | None = None) -> str | None:
    """The admin token: the first line of `path`, else $STRATA_ADMIN_TOKEN (the settings'),
    else None (no AdminService). A file, not a command-line argument, so the secret stays out
    of `ps`."""
    if path is not None:
        path = path.expanduser()
        if not path.is_file():
            raise InputError(f"admin token file not found: {path}")
        lines = path.read_text().strip().splitlines()
        token = lines[0].strip() if lines else ""
        if not token:
            raise InputError(f"admin token file {path} is empty")
        return token
    token = ((settings or load_settings()).admin_token or "").strip()
    return token or None


def serve_command(
    bundles: Annotated[
        Path, typer.Option("--bundles", help="bundle directory; its CURRENT version is served")
    ],
    port: Annotated[
        int, typer.Option(help="port to listen on (0: any free port)", min=0, max=65535)
    ] = 50051,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    device: Annotated[
        str | None, typer.Option(help="encoder device: auto (CUDA when present), cpu, cuda:1")
    ] = None,
    max_batch: Annotated[int, typer.Option(help="queries per encoder call at most", min=1)] = 32,
    max_wait_ms: Annotated[
        float,
        typer.Option(
            help="longest a query waits for others to batch with (0: none; queries that "
            "arrive while a batch runs still form the next one)",
            min=0,
        ),
    ] = BatchingConfig().max_wait_ms,
    max_queue: Annotated[
        int,
        typer.Option(
            help="requests waiting at most (a BatchSearch counts once); beyond, "
            "RESOURCE_EXHAUSTED at once",
            min=1,
        ),
    ] = BatchingConfig().max_queue,
    batching: Annotated[
        bool, typer.Option(help="micro-batch concurrent queries (--no-batching: one by one)")
    ] = True,
    redis_url: Annotated[
        str | None,
        typer.Option(
            "--redis-url",
            help="Redis (redis://host:6379/0) for the shared query-embedding cache and to follow "
            "the bundle versions `strata index` announces there (hot swap); default: "
            "$STRATA_REDIS_URL",
        ),
    ] = None,
    redis_prefix: Annotated[
        str,
        typer.Option(
            "--redis-prefix", envvar="STRATA_REDIS_PREFIX", help="prefix of the Redis keys"
        ),
    ] = "strata",
    metrics_port: Annotated[
        int | None,
        typer.Option(help="serve Prometheus /metrics over HTTP on this port (0: any free port)"),
    ] = None,
    metrics_host: Annotated[
        str | None, typer.Option(help="address /metrics listens on (default: --host)")
    ] = None,
    http_port: Annotated[
        int | None,
        typer.Option(
            help="serve the HTTP/JSON API and the search page on this port (0: any free port)"
        ),
    ] = None,
    http_host: Annotated[
        str | None, typer.Option(help="address the HTTP API listens on (default: --host)")
    ] = None,
    admin_token_file: Annotated[
        Path | None,
        typer.Option(
            help=f"file holding the AdminService bearer token (else ${ADMIN_TOKEN_ENV}; "
            "neither: no AdminService)"
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option(help="PEM certificate chain: serve gRPC over TLS")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key of --tls-cert")] = None,
    grace: Annotated[
        float,
        typer.Option(
            help="seconds running calls get to finish when stopping; then they are cancelled "
            "(a BatchSearch between two of its micro-batches) and the process exits",
            min=0,
        ),
    ] = 5.0,
    translator: Annotated[
        Path | None,
        typer.Option(
            help="a query translator from `strata upgrade`: embed queries with its newer model "
            "and answer them from this bundle"
        ),
    ] = None,
    image_root: Annotated[
        Path | None,
        typer.Option(
            help="folder the bundle's relative image paths are resolved against, in hits and "
            "for the page's thumbnails (none outside it is served; default: "
            "$STRATA_IMAGE_ROOT, else the corpus root recorded when the images were embedded)"
        ),
    ] = None,
    backend: Annotated[
        str,
        typer.Option(
            help="where rows are scored: faiss (the bundle's own files) or the Milvus engine "
            "`strata index export` wrote the bundle to (milvus://host:19530 | ./file.db); "
            "with Milvus the alias's version is served and followed"
        ),
    ] = "faiss",
    collection: Annotated[
        str, typer.Option(help="Milvus backend: the alias `strata index export --name` set")
    ] = "strata",
    engine_timeout: Annotated[
        float, typer.Option(help="Milvus backend: the deadline of every engine call, seconds")
    ] = 2.0,
) -> None:
    """Serve a bundle over gRPC (strata.v1.SearchService), and HTTP with --http-port, until
    Ctrl-C."""
    from service.api.server import ServerConfig, StrataServer, serve
    from service.engine.search import EngineConfig, SearchEngine
    from service.query.cache import open_cache
    from service.serving.hot_swap import HotSwapper
    from service.serving.metrics import ServerMetrics

    settings = load_settings()
    image_root = image_root or settings.image_root
    if image_root is not None and not image_root.expanduser().is_dir():
        raise InputError(f"--image-root is not a folder: {image_root}")
    if redis_url is None:
        redis_url = settings.redis_url
    for what, path in (("certificate", tls_cert), ("key", tls_key)):
        if path is not None and not path.expanduser().is_file():
            raise InputError(f"TLS {what} file not found: {path}")
    values = {
        "host": host,
        "port": port,
        "batching": {
            "enabled": batching,
            "max_batch": max_batch,
            "max_wait_ms": max_wait_ms,
            "max_queue": max_queue,
        },
        "grace_s": grace,
        "metrics_port": metrics_port,
        "metrics_host": metrics_host,
        "http_port": http_port,
        "http_host": http_host,
        "image_root": image_root.expanduser() if image_root else None,
        "admin_token": read_admin_token(admin_token_file, settings),
        "tls_cert": tls_cert.expanduser() if tls_cert else None,
        "tls_key": tls_key.expanduser() if tls_key else None,
    }
    config = build_config(ServerConfig, values, "strata serve")  # InputError: one line
    # what a user can get wrong is checked before the bundle and the models load (seconds)
    check_port_free(host, port, "--port")
    if metrics_port is not None:
        check_port_free(metrics_host or host, metrics_port, "--metrics-port")
    if http_port is not None:
        check_port_free(http_host or host, http_port, "--http-port")
    from training.core.encoders import resolve_device

    device = resolve_device(device or settings.device)
    metrics = ServerMetrics()  # the server's series; the cache records into them too
    cache = open_cache(redis_url, redis_prefix, metrics=metrics)  # a bad URL fails here, early
    engine_config = EngineConfig(
        image_root=image_root.expanduser().resolve() if image_root else None
    )
    milvus = backend != "faiss"
    if milvus:
        from indexer.export_cli import require_pymilvus
        from service.engine.milvus import AliasFollower, MilvusEngine

        require_pymilvus()
        if translator is not None:
            raise InputError("--translator serves a local bundle only (--backend faiss)")
        engine: SearchEngine = MilvusEngine.open_backend(
            backend, bundles, collection, device=device, batch_size=settings.batch_size,
            config=engine_config, cache=cache, timeout_s=engine_timeout,
        )  # fmt: skip
    else:
        engine = SearchEngine.open(
            bundles, device=device, batch_size=settings.batch_size, cache=cache,
            translator=translator, config=engine_config,
        )  # fmt: skip

    def ready(server: StrataServer) -> None:
        bundle = engine.bundle
        mode = (
            f"batching up to {max_batch} queries, {max_wait_ms:g} ms" if batching else "no batching"
        )
        typer.echo(
            f"serving {bundle.path} ({bundle.rows} rows, {bundle.manifest.encoder}, "
            f"{engine.encoder.device if engine.encoder else 'no encoder'}; {mode}) "
            f"on {server.address}; Ctrl-C stops",
        )
        if translator is not None and engine.encoder is not None:
            typer.echo(f"queries: {engine.encoder.id} (translated by {translator})")
        if config.tls_cert is not None:
            typer.echo(f"TLS: certificate {config.tls_cert}")
        if server.metrics_port is not None:
            where = config.metrics_host or config.host
            typer.echo(f"metrics: http://{where}:{server.metrics_port}/metrics")
        if server.http_address is not None:
            typer.echo(f"http: http://{server.http_address}/ (the page; the API under /v1/)")
        if config.admin_token is not None:
            typer.echo("admin: strata.v1.AdminService on (bearer token)")
        cache.report_state()  # strata_redis_up from the start
        typer.echo(cache.describe())
        if milvus:
            followers.append(AliasFollower(server).start())
            typer.echo(f"backend: {backend}, following alias {collection}")
        elif redis_url:
            swappers.append(HotSwapper(server, redis_url, redis_prefix))
            swappers[0].start()  # on the server's loop
            typer.echo(f"hot swap: following {redis_prefix}:bundle:versions")

    swappers: list[HotSwapper] = []
    followers: list[AliasFollower] = []

    try:
        asyncio.run(serve(engine, config, on_ready=ready, metrics=metrics))
    finally:
        cache.close()
    typer.echo("stopped")
    exit_now()


def check_port_free(host: str, port: int, option: str) -> None:
    """InputError when `host:port` cannot be listened on (taken, or not this machine's), found
    by binding a plain socket, so the user hears it at once and without gRPC's core log."""
    if port == 0:
        return
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no obstacle
        try:
            probe.bind(address)
        except OSError as exc:
            taken = exc.errno == errno.EADDRINUSE
            why = "the port is in use (another server?)" if taken else exc.strerror
            raise InputError(
                f"cannot listen on {host}:{port}: {why}; choose another {option}"
            ) from None


def exit_now() -> None:
    """End the process once the server has stopped: output flushed, logging shut down, then
    `os._exit(0)`. The interpreter's own teardown (torch's and gRPC's native state, library
    threads) took 1.2 s more on the 2-core machine — time the shutdown budget (exit within
    --grace + 1 s) does not have, spent on nothing that needs saving."""
    import logging
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(0)


def search_command(
    query: Annotated[str | None, typer.Argument(help="the text query")] = None,
    image: Annotated[
        Path | None, typer.Option(help="an image file as the query, instead of text")
    ] = None,
    granularity: Annotated[
        str, typer.Option("--granularity", "-g", help=" | ".join(GRANULARITY_CHOICES))
    ] = AUTO,
    k: Annotated[
        int, typer.Option("--top-k", "-k", help="hits to return, 1-1000", min=1, max=1000)
    ] = 10,
    require: Annotated[
        list[str] | None,
        typer.Option(help="a concept every hit must have: name or label (+12); repeatable"),
    ] = None,
    exclude: Annotated[
        list[str] | None, typer.Option(help="a concept no hit may have; repeatable")
    ] = None,
    scope: Annotated[
        str,
        typer.Option(
            help="--require/--exclude stand for concepts of this CDS scope only: any | local | "
            "global"
        ),
    ] = "any",
    min_recall: Annotated[
        float | None,
        typer.Option(
            help="recall@k (vs exact search at the prefix) the search must reach, in (0, 1]: an "
            "approximate index searches at its fastest tuned operating point reaching it"
        ),
    ] = None,
    explain: Annotated[bool, typer.Option(help="show each hit's concepts and shared ones")] = False,
    plan: Annotated[
        str,
        typer.Option(help="search plan: " + " | ".join(PLAN_KINDS) + " (the server's choice)"),
    ] = AUTO,
    shortlist_prefix: Annotated[
        int,
        typer.Option(help="funnel: the prefix length to shortlist at (0: the server's)", min=0),
    ] = 0,
    factor: Annotated[
        int, typer.Option(help="funnel: shortlist k × factor rows (0: the server's)", min=0)
    ] = 0,
    where: Annotated[
        list[str] | None,
        typer.Option(
            help="a metadata condition every hit must meet: FIELD=VALUE, 'FIELD IN A,B', "
            "FIELD>=X (also >, <=, <); repeatable (all must hold)"
        ),
    ] = None,
    group_by: Annotated[
        str | None,
        typer.Option(help="group hits by this metadata column: k groups (e.g. one per image)"),
    ] = None,
    group_size: Annotated[
        int | None, typer.Option(help="hits per group with --group-by, 1-100 (default 1)")
    ] = None,
    fields: Annotated[
        str | None,
        typer.Option(help="comma list of metadata columns to show (default: caption)"),
    ] = None,
    target: Annotated[str, typer.Option(help="server address host:port")] = DEFAULT_TARGET,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    timeout: Annotated[
        float, typer.Option(help="seconds to wait for the answer", min=0.001)
    ] = 30.0,
) -> None:
    """Search a running server and print its hits, scores and concepts."""
    if (query is None) == (image is None):
        raise InputError("give a text QUERY or --image FILE (one of them)")
    if image is not None and not image.expanduser().is_file():  # before any call to the server
        raise InputError(f"image file not found: {image}")
    if group_size is not None and not group_by:
        raise InputError("--group-size needs --group-by")
    with StrataClient(target, timeout=timeout) as client:
        if fields is None:
            available = client.index_info().metadata_fields
            columns = [c for c in ("caption",) if c in available]
        else:
            columns = [f.strip() for f in fields.split(",") if f.strip()]
        result = client.search(
            query,
            image=image,
            granularity=granularity,
            k=k,
            require=require or (),
            exclude=exclude or (),
            explain=explain,
            metadata_fields=columns,
            scope=scope,
            min_recall=min_recall,
            plan=SearchPlan(plan.strip().lower(), shortlist_prefix, factor),
            where=where or (),
            group_by=group_by or "",
            group_size=group_size,
        )
    if as_json:
        typer.echo(json.dumps(asdict(result), indent=2, default=str))
        return
    typer.echo(format_result(result, columns, explain))


def _scoped(name: str, scope: str | None) -> str:
    """A concept's name with its CDS scope marked: 'dog·L' local, 'beach·G' global."""
    return f"{name}·{scope[0].upper()}" if scope else name


def format_result(
    result: SearchResult, columns: list[str], explain: bool, max_concepts: int = 8
) -> str:
    """A readable table: rank, score, id, the metadata columns, and with explain the hit's
    concepts and the concepts it shares with the query (with their contributions). Concept
    lists show their `max_concepts` strongest entries and say how many more there are."""
    lines = [
        f"granularity  {result.granularity.value} (prefix {result.prefix_length}): "
        f"{result.routing_reason}"
    ]
    if result.plan is not None:
        lines.append(f"plan         {result.plan.describe(result.prefix_length)}")
    if result.filtered_rows is not None:
        lines.append(f"filter       {result.filtered_rows} rows allowed")
    if explain and result.query_concepts:
        strongest = sorted(result.query_concepts, key=lambda c: -c.activation)
        names = [concept_text(c.name, c.label) for c in strongest]
        lines.append(f"query        {_listed(names, max_concepts)}")
    if not result.hits:
        lines.append("no hits")
        return "\n".join(lines)
    grouped = any(hit.group for hit in result.hits)
    header = ["#", "score", "id", *(["group"] if grouped else []), *columns]
    if explain:
        header += ["concepts", "shared (contribution)"]
    rows = []
    for rank, hit in enumerate(result.hits, start=1):
        row = [str(rank), f"{hit.score:.3f}", hit.id, *([_cut(hit.group)] if grouped else [])]
        row += [_cut(hit.metadata.get(c, "")) for c in columns]
        if explain:
            row.append(", ".join(_scoped(c.name, c.scope) for c in hit.concepts))
            shared = [
                f"{_scoped(s.name, s.scope)} ({s.contribution:.3f})" for s in hit.shared_concepts
            ]
            row.append(_listed(shared, max_concepts))
        rows.append(row)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines.append("")
    for row in [header, *rows]:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _listed(items: list[str], most: int) -> str:
    more = f", … {len(items) - most} more" if len(items) > most else ""
    return ", ".join(items[:most]) + more


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_WIDTH else text[: TEXT_WIDTH - 1] + "…"
