"""`strata serve`: its options, and the order of its parts (service/cli/serve_setup.py).

What a user can get wrong (files, ports, values) is checked before the bundle and the models
load; then the engine opens (local FAISS files, or a Milvus collection), the server starts,
announces what it serves, follows new versions (Redis hot swap, or the Milvus alias) and runs
until Ctrl-C; the process ends at once once it has stopped.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from service.cli.serve_setup import (
    ADMIN_TOKEN_ENV,
    LITE_DEADLINE_S,
    SERVER_DEADLINE_S,
    WORKER_LIMIT,
    Backend,
    ServingConfig,
    engine_deadline,
    exit_now,
    server_config,
    worker_count,
)
from service.serving.batching import BatchingConfig
from training.core.settings import load_settings


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
    lanes: Annotated[
        int,
        typer.Option(
            help="batches the engine works on at once, each on its own thread (a request holds "
            "one at most: a small query runs beside the heaviest request)",
            min=1,
        ),
    ] = BatchingConfig().lanes,
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
        float | None,
        typer.Option(
            help="Milvus backend: the deadline of every engine call, seconds (default: "
            f"{SERVER_DEADLINE_S:g} for a Milvus server, {LITE_DEADLINE_S:g} for a Milvus Lite "
            "file, which evaluates filters in Python)",
            min=0.001,
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            help="server processes sharing the port and one copy of the bundle (default: one "
            f"per core, up to {WORKER_LIMIT}; a Milvus Lite file: 1)",
            min=1,
        ),
    ] = None,
) -> None:
    """Serve a bundle over gRPC (strata.v1.SearchService), and HTTP with --http-port, until
    Ctrl-C."""
    settings = load_settings()
    image_root = image_root or settings.image_root
    if redis_url is None:
        redis_url = settings.redis_url
    config = server_config(
        settings,
        host=host,
        port=port,
        batching=batching,
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        max_queue=max_queue,
        lanes=lanes,
        grace=grace,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        http_port=http_port,
        http_host=http_host,
        image_root=image_root,
        admin_token_file=admin_token_file,
        tls_cert=tls_cert,
        tls_key=tls_key,
    )
    chosen = Backend.parse(backend)  # the one reading of --backend's text
    workers = worker_count(workers, chosen)
    serving = ServingConfig(  # built once; the server, its workers and the engine take it
        bundles=bundles,
        backend=chosen,
        collection=collection,
        translator=translator,
        image_root=image_root,
        device=device or settings.device,
        batch_size=settings.batch_size,
        redis_url=redis_url,
        redis_prefix=redis_prefix,
        engine_timeout=engine_timeout or engine_deadline(chosen),
        server=config,
        mode=(
            f"batching up to {max_batch} queries, {max_wait_ms:g} ms" if batching else "no batching"
        ),
    )
    if workers > 1:
        from service.cli.pool.parent import WorkerPool
        from service.cli.pool.worker import WorkerSpec

        WorkerPool(WorkerSpec(serving), workers, say=typer.echo).run()  # until a signal
        typer.echo("stopped")
        exit_now()
    from service.api.server import serve
    from service.cli.serve_setup import Announcement, open_engine
    from service.engine.compute_threads import limit_blas
    from service.query.cache import open_cache
    from service.serving.metrics import ServerMetrics
    from training.core.encoders import resolve_device

    limit_blas()  # numpy's BLAS on one thread (compute_threads.py); FAISS and torch as they are
    device = resolve_device(serving.device)
    metrics = ServerMetrics()  # the server's series; the cache records into them too
    cache = open_cache(redis_url, redis_prefix, metrics=metrics)  # a bad URL fails here, early
    engine = open_engine(serving, device, cache)
    announcement = Announcement(engine, serving, cache)
    try:
        asyncio.run(serve(engine, config, on_ready=announcement.ready, metrics=metrics))
    finally:
        cache.close()
    typer.echo("stopped")
    exit_now()
