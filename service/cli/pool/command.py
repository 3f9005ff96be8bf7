"""`strata serve --workers N` from the command's options: the workers' spec, then the pool."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from service.cli.pool.parent import WorkerPool
from service.cli.pool.worker import WorkerSpec

if TYPE_CHECKING:
    from service.api.server import ServerConfig


def serve_pool(
    *,
    bundles: Path,
    backend: str,
    collection: str,
    translator: Path | None,
    image_root: Path | None,
    device: str,
    batch_size: int,
    redis_url: str | None,
    redis_prefix: str,
    engine_timeout: float,
    config: ServerConfig,
    mode: str,
    workers: int,
) -> None:
    """`strata serve --workers N` (N > 1): the pool of service/cli/pool/parent.py, until a
    signal; a worker that cannot start is a ServiceError (its one-line reason)."""
    from service.cli.serve_setup import usable_cores

    cores = usable_cores()
    level = logging.getLogger("service").getEffectiveLevel()
    spec = WorkerSpec(
        bundles=bundles, backend=backend, collection=collection, translator=translator,
        image_root=image_root.expanduser().resolve() if image_root else None, device=device,
        batch_size=batch_size, redis_url=redis_url, redis_prefix=redis_prefix,
        engine_timeout=engine_timeout, config=config, mode=mode, workers=workers,
        public_metrics_port=None, threads=max(1, cores // workers),
        log_level=logging.getLevelName(level),
    )  # fmt: skip
    WorkerPool(spec, workers, say=typer.echo).run()
