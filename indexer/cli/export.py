"""`strata index export BUNDLES --to milvus://host:19530 | ./file.db`: a bundle version into
Milvus, published by switching an alias (indexer/milvus/store.py)."""

from __future__ import annotations

import importlib.util
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

import typer

from indexer.format.bundle import Bundle
from indexer.format.manifest import BundleError, version_name
from indexer.milvus.export import export_bundle
from indexer.milvus.store import (
    DEFAULT_GRACE_S,
    DEFAULT_NAME,
    INSERT_ROWS,
    ExportError,
    MilvusStore,
)
from indexer.verify.check import check_servable


def require_pymilvus() -> None:
    """ExportError with the install line when pymilvus is absent (the `milvus` extra)."""
    if importlib.util.find_spec("pymilvus") is None:
        raise ExportError("the Milvus backend needs pymilvus: pip install 'strata[milvus]'")


def export_command(
    bundles: Annotated[
        Path, typer.Option("--bundles", help="bundle directory (or one version folder)")
    ],
    to: Annotated[
        str,
        typer.Option(
            "--to", help="the engine: milvus://host:19530, https://…, or a Milvus Lite ./file.db"
        ),
    ],
    version: Annotated[
        str | None,
        typer.Option(help="the version to export, v000007 or 7 (default: the current one)"),
    ] = None,
    name: Annotated[
        str, typer.Option(help="the alias; each version is the collection NAME__v000007")
    ] = DEFAULT_NAME,
    publish: Annotated[
        bool, typer.Option(help="switch the alias to the new collection once it is loaded")
    ] = True,
    grace: Annotated[
        float,
        typer.Option(help="seconds a retired version stays before an export drops it", min=0),
    ] = DEFAULT_GRACE_S,
    timeout: Annotated[
        float,
        typer.Option(
            help="deadline of every engine call, seconds; flushing, building the indexes and "
            "loading get it once per 100,000 rows",
            min=0.001,
        ),
    ] = 60.0,
    batch_rows: Annotated[int, typer.Option(help="rows per insert call", min=1)] = INSERT_ROWS,
    verbose: Annotated[
        bool, typer.Option(help="let pymilvus log its own errors (with their tracebacks)")
    ] = False,
) -> None:
    """Write a bundle version into Milvus (a collection per version, an alias on the current)."""
    require_pymilvus()
    root = bundles.expanduser()
    if version is not None:
        folder = version_name(int(version)) if version.isdigit() else version
        bundle = Bundle.open_version(root / folder)
    else:
        bundle = Bundle.open(root)
    if batch_rows < 1:
        raise BundleError(f"--batch-rows must be positive, got {batch_rows}")
    check_servable(bundle.path)  # what serving it locally would check, or refused
    store = MilvusStore(to, timeout, verbose)
    with ExitStack() as stack:
        stack.callback(store.close)
        bars: list[Any] = []  # the bar starts with the first rows, after the checks

        def progress(done: int) -> None:
            if not bars:
                bars.append(
                    stack.enter_context(typer.progressbar(length=bundle.rows, label="inserting"))
                )
            bars[0].update(done - bars[0].pos)

        summary = export_bundle(
            bundle,
            store,
            name,
            publish=publish,
            grace_s=grace,
            rows_per_batch=batch_rows,
            progress=progress,
        )
    typer.echo(
        f"exported     {bundle.path} → {summary.collection} at {to} "
        f"({summary.rows} rows, {summary.seconds:.1f} s)"
    )
    if summary.published:
        was = f" (was {summary.previous})" if summary.previous else ""
        typer.echo(f"published    alias {summary.alias} → {summary.collection}{was}")
    else:
        typer.echo(f"not published: alias {summary.alias} unchanged")
    for dropped in summary.dropped:
        typer.echo(f"dropped      {dropped} (retired over {grace:g} s ago)")
