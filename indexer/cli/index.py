"""`strata index build | add | delete | publish | export | verify | info`: the indexer's commands.

Every command that makes a version takes `--redis-url` (default: the STRATA_REDIS_URL
environment variable) and `--redis-prefix` (STRATA_REDIS_PREFIX, default "strata"): with a URL
the version is also recorded and announced in Redis (indexer/versions/publish.py), without one the
CURRENT pointer file alone publishes it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from tqdm.contrib.logging import logging_redirect_tqdm

from indexer.build.full import BuildSummary, build_bundle
from indexer.build.inputs import BuildConfig, BuildError
from indexer.cli.export import export_command
from indexer.cli.inspection import info, verify
from indexer.cli.options import (
    Engine,
    Keep,
    OldBundles,
    Progress,
    RayAddress,
    RedisPrefix,
    RedisUrl,
    bundles_of,
    publisher_for,
)
from indexer.cli.summaries import format_build_summary, format_update_summary
from indexer.format.index_plan import parse_size
from indexer.format.manifest import BundleError, parse_version_name, read_manifest, version_name
from indexer.format.store import DTYPES
from indexer.format.store.block_layout import LAYOUTS
from indexer.format.tuning import RECALL_TARGET, TUNING_QUERIES
from indexer.update.row_changes import read_id_file
from indexer.update.rows import AddConfig, DeleteConfig, UpdateSummary, add_rows, delete_rows
from indexer.verify.check import check_servable
from indexer.versions.bundle_store import BundleStore
from indexer.versions.publish import DEFAULT_PREFIX, publish_version
from training.core.commands import HiddenArgumentsCommand, examples

Summary = TypeVar("Summary", BuildSummary, UpdateSummary)

index_app = typer.Typer(
    help="Build, update, publish, verify and inspect index bundles (one shared store of every "
    "row, shortlist codes, concept postings).",
    no_args_is_help=True,
)


def run_streaming(
    job: Callable[..., Summary], config: BuildConfig | AddConfig, url: str | None, prefix: str
) -> Summary:
    """A job that streams a cache (build, add), with its publisher, and its log lines written
    around the progress bars."""
    publisher = publisher_for(url, prefix)
    with logging_redirect_tqdm():
        return job(config, publisher=publisher)


@index_app.command(
    "build",
    epilog=examples(
        "strata index build --cache runs/demo/cache-flickr8k-minilm "
        "--grasp runs/demo/grasp-flickr8k "
        "--cedar runs/demo/cedar-flickr8k --out runs/bundles",
        "strata index build --cache runs/demo/cache-flickr8k-minilm "
        "--grasp runs/demo/grasp-flickr8k "
        "--cedar runs/demo/cedar-flickr8k --out runs/bundles-hnsw "
        "--index-type 24=HNSW32 --memory-budget 1GiB",
    ),
)
def build(
    cache: Annotated[Path, typer.Option("--cache", help="embedding cache to index")],
    grasp: Annotated[Path, typer.Option("--grasp", help="GraSP-VL transform artifact")],
    cedar: Annotated[Path, typer.Option("--cedar", help="CEDAR transform artifact")],
    out: Annotated[Path, typer.Option("--out", "-o", help="bundle directory (holds versions)")],
    modality: Annotated[
        str | None, typer.Option(help="text | image (default: image when the cache has it)")
    ] = None,
    memory_budget: Annotated[
        str, typer.Option(help="RAM one prefix index may take, e.g. 4GiB (picks the index type)")
    ] = "4GiB",
    index_type: Annotated[
        list[str] | None,
        typer.Option(
            "--index-type",
            help="PREFIX=FACTORY override, repeatable: 24=HNSW32, object=hnsw, full=Flat",
        ),
    ] = None,
    keep: Keep = 3,
    seed: Annotated[int, typer.Option(help="seed of the training and verification samples")] = 0,
    recall_target: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="recall@10 (against exact search at the same prefix) that the approximate "
            "indexes' search parameters are tuned to",
        ),
    ] = RECALL_TARGET,
    tuning_queries: Annotated[
        int, typer.Option(min=1, help="held-out gallery rows the tuning measures recall on")
    ] = TUNING_QUERIES,
    store: Annotated[
        str,
        typer.Option(
            help="int8 | float16 | none: every row kept once, for every prefix (none: a "
            "float32 file per prefix, the layout before the store)"
        ),
    ] = "int8",
    store_on_disk: Annotated[
        bool,
        typer.Option(
            "--store-on-disk",
            help="the store is read through mmap for reranks only, the concepts' activations "
            "for explained rows only: a replica need not hold them in RAM (index info counts "
            "them on disk)",
        ),
    ] = False,
    store_layout: Annotated[
        str,
        typer.Option(
            help="blocks | rows: an int8 store's codes one file a block (a direct scan reads "
            "each block with torch's int8 kernel) or one file of whole rows (a float16 store "
            "keeps whole rows)"
        ),
    ] = "blocks",
    progress: Progress = True,
    engine: Engine = "local",
    ray_address: RayAddress = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = DEFAULT_PREFIX,
) -> None:
    """Index a cache into a new bundle version, verify it, publish it atomically.

    Every row is kept once, rotated by the GraSP-VL artifact, in a shared store (int8 codes by
    default) whose prefixes serve every granularity of its contract; past 50,000 rows the
    shortest prefix also keeps shortlist codes (IVF,SQ8) that a funnel reranks from the store.
    Concept postings come from the CEDAR artifact, ids and metadata from the cache. CURRENT
    moves only once all of it is written and verified, so a killed build leaves the previous
    version current."""
    if recall_target <= 0:
        raise BuildError("--recall-target must lie in (0, 1]")
    if store not in ("none", *DTYPES):
        raise BuildError(f"--store {store!r}: choose none, {', '.join(DTYPES)}")
    if store_on_disk and store == "none":
        raise BuildError("--store-on-disk needs a store: --store int8 or float16")
    if store_layout not in LAYOUTS:
        raise BuildError(f"--store-layout {store_layout!r}: choose {', '.join(LAYOUTS)}")
    config = BuildConfig(
        store=store,
        store_on_disk=store_on_disk,
        store_layout=store_layout,
        cache=cache,
        grasp=grasp,
        cedar=cedar,
        out=out,
        modality=modality,
        memory_budget=parse_size(memory_budget),
        index_types=tuple(index_type or ()),
        keep=keep,
        seed=seed,
        recall_target=recall_target,
        tuning_queries=tuning_queries,
        progress=progress,
        engine=engine,
        ray_address=ray_address,
    )
    typer.echo(format_build_summary(run_streaming(build_bundle, config, redis_url, redis_prefix)))


@index_app.command(
    "add",
    epilog=examples(
        "strata embed run --corpus compositional --scenes 200 --out runs/comp200",
        "strata index add --bundles runs/demo/bundles-flickr8k --cache runs/comp200",
    ),
)
def add(
    bundles: Annotated[Path, typer.Option("--bundles", help="bundle directory to add to")],
    cache: Annotated[Path, typer.Option("--cache", help="embedding cache of the new rows")],
    keep: Keep = 3,
    progress: Progress = True,
    engine: Engine = "local",
    ray_address: RayAddress = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = DEFAULT_PREFIX,
) -> None:
    """Append a cache's rows to the current version: a new version, published like a build.

    Only the new rows are rotated and encoded (with the bundle's own artifact copies): the
    store's rows and the shortlist codes are extended and re-tuned, the postings merged, the
    ids appended. The cache must have the bundle's encoder, dimension and modality,
    and only ids the bundle does not hold."""
    config = AddConfig(
        bundles=bundles,
        cache=cache,
        keep=keep,
        progress=progress,
        engine=engine,
        ray_address=ray_address,
    )
    summary = run_streaming(add_rows, config, redis_url, redis_prefix)
    typer.echo(format_update_summary(summary, source=str(cache)))


@index_app.command(
    "delete",
    epilog=examples(
        "strata index delete --bundles runs/demo/bundles-flickr8k --id 1000268201_693b08cb0e.jpg#0",
        "strata index delete --bundles runs/demo/bundles-flickr8k --id 1000268201_693b08cb0e.jpg#0 "
        "--id 1000268201_693b08cb0e.jpg#1 --missing-ok",
    ),
)
def delete(
    bundles: Annotated[Path, typer.Option("--bundles", help="bundle directory to delete from")],
    ids_file: Annotated[
        Path | None, typer.Option("--ids", help="file of ids to delete, one a line")
    ] = None,
    id_: Annotated[
        list[str] | None, typer.Option("--id", help="an id to delete (repeatable)")
    ] = None,
    missing_ok: Annotated[
        bool, typer.Option("--missing-ok", help="skip ids the bundle does not hold")
    ] = False,
    keep: Keep = 3,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = DEFAULT_PREFIX,
) -> None:
    """Remove rows by id from the current version: a new version, published like a build.

    The other rows are renumbered (row positions stay contiguous); the store keeps the other
    rows' codes, the shortlist codes' lists are filtered, the postings filtered; no cache is
    read.
    Unknown ids are refused, all named, unless --missing-ok."""
    ids = [*(read_id_file(ids_file) if ids_file else []), *(id_ or [])]
    config = DeleteConfig(bundles=bundles, ids=tuple(ids), missing_ok=missing_ok, keep=keep)
    summary = delete_rows(config, publisher=publisher_for(redis_url, redis_prefix))
    typer.echo(format_update_summary(summary))


@index_app.command(
    "publish",
    cls=HiddenArgumentsCommand,
    epilog=examples(
        "strata index publish --bundles runs/demo/bundles-flickr8k --version 1",
        "strata index publish --bundles runs/demo/bundles-flickr8k --redis-url redis://127.0.0.1:6379/0",
    ),
)
def publish(
    old_bundles: OldBundles = None,
    bundles: Annotated[
        Path | None, typer.Option("--bundles", help="bundle directory", show_default=False)
    ] = None,
    version: Annotated[
        str | None,
        typer.Option(help="the version to publish, v000007 or 7 (default: the current one)"),
    ] = None,
    sample: Annotated[
        int, typer.Option(help="rows recomputed from the source cache when verifying", min=0)
    ] = 64,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = DEFAULT_PREFIX,
) -> None:
    """Publish a version already written: CURRENT, and Redis when configured.

    A rollback, or a version whose announcement failed. Without --version the current version
    is announced again, which brings Redis level with CURRENT. The version is verified first
    (the checks of `strata index verify`); one that fails is refused, nothing changes."""
    bundles = bundles_of(bundles, old_bundles)
    store = BundleStore(bundles)
    if not store.root.is_dir():
        raise BundleError(f"bundle directory not found: {bundles}")
    name = version
    if name is not None and name.isdigit():
        name = version_name(int(name))
    publisher = publisher_for(redis_url, redis_prefix)
    if publisher is not None:
        publisher.check()
    with store.lock():
        name = name or store.current()
        if name is None:
            raise BundleError(f"{bundles} has no published bundle; name a --version")
        if parse_version_name(name) is None:
            raise BundleError(f"--version {version!r} is not a version name (v000007 or 7)")
        read_manifest(store.root / name)  # a whole version (its manifest is written last)
        check_servable(store.root / name, sample=sample)  # what `verify` checks, or refused
        announced = publish_version(store, name, publisher)
    typer.echo(f"published    {store.root / name} (now CURRENT)")
    if announced:
        typer.echo(f"announced    {announced}")


index_app.command(  # into Milvus: indexer/cli/export.py
    "export",
    epilog=examples(
        "strata index export --bundles runs/demo/bundles-flickr8k --to ./strata-milvus.db",
        "strata index export --bundles runs/demo/bundles-flickr8k --to milvus://milvus:19530 "
        "--grace 600",
    ),
)(export_command)


index_app.command(  # reads only: indexer/cli/inspection.py
    "verify",
    cls=HiddenArgumentsCommand,
    epilog=examples(
        "strata index verify --bundles runs/demo/bundles-flickr8k",
        "strata index verify --bundles runs/demo/bundles-flickr8k/v000001 --sample 256",
    ),
)(verify)

index_app.command(
    "info",
    cls=HiddenArgumentsCommand,
    epilog=examples(
        "strata index info --bundles runs/demo/bundles-flickr8k",
        "strata index info --bundles runs/demo/bundles-flickr8k --json",
    ),
)(info)
