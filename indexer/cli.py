"""`strata index build | verify | info`: the indexer's command group."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from tqdm.contrib.logging import logging_redirect_tqdm

from indexer.build import BuildConfig, BuildSummary, build_bundle
from indexer.bundle import BundleError, read_manifest
from indexer.index_plan import format_bytes, parse_size
from indexer.verify import resolve_version, verify_bundle
from indexer.versions import BundleStore

index_app = typer.Typer(
    help="Build, verify and inspect index bundles (a FAISS index per prefix + concept postings)."
)


@index_app.command("build")
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
    keep: Annotated[int, typer.Option(help="versions to keep (the current one always)")] = 3,
    seed: Annotated[int, typer.Option(help="seed of the training and verification samples")] = 0,
    progress: Annotated[bool, typer.Option(help="show progress bars")] = True,
) -> None:
    """Index a cache into a new bundle version, verify it, publish it atomically.

    One FAISS index per prefix length of the GraSP-VL artifact's contract, concept postings
    from the CEDAR artifact, ids and metadata; CURRENT moves only once all of it is written and
    verified, so a killed build leaves the previous version current."""
    config = BuildConfig(
        cache=cache,
        grasp=grasp,
        cedar=cedar,
        out=out,
        modality=modality,
        memory_budget=parse_size(memory_budget),
        index_types=tuple(index_type or ()),
        keep=keep,
        seed=seed,
        progress=progress,
    )
    with logging_redirect_tqdm():
        summary = build_bundle(config)
    typer.echo(format_build_summary(summary))


def format_build_summary(summary: BuildSummary) -> str:
    lines = [
        f"bundle       {summary.path} (now CURRENT)",
        f"rows         {summary.rows} from {summary.shards} shards"
        + (f", {summary.training_rows} sampled for training" if summary.training_rows else ""),
        "indexes      "
        + ", ".join(
            f"{p.length}: {p.factory}{' (on disk)' if p.ondisk else ''}" for p in summary.prefixes
        ),
        f"time         {summary.seconds:.1f} s, {summary.rows_per_second:.0f} rows/s",
        "files",
    ]
    width = max(len(name) for name in summary.files)
    lines += [
        f"  {name:<{width}}  {format_bytes(size):>10}"
        for name, size in sorted(summary.files.items())
    ]
    lines.append(f"on disk      {format_bytes(summary.bytes_on_disk)}")
    if summary.removed_versions:
        lines.append(f"removed      {', '.join(summary.removed_versions)} (--keep)")
    if summary.cleaned:
        lines.append(f"cleaned      {len(summary.cleaned)} leftovers of killed builds")
    return "\n".join(lines)


@index_app.command("verify")
def verify(
    bundle: Annotated[Path, typer.Argument(help="bundle directory (checks CURRENT) or version")],
    cache: Annotated[
        Path | None, typer.Option(help="source cache (default: the path the manifest records)")
    ] = None,
    sample: Annotated[int, typer.Option(help="rows recomputed from the cache")] = 64,
) -> None:
    """Check a bundle version: files, indexes, postings, ids, artifacts, rows vs the cache.

    Exit 0 and `ok`, or one FAULT line per problem (naming its file) and exit 2."""
    path = resolve_version(bundle)
    report = verify_bundle(path, cache_dir=cache, sample=sample)
    for note in report.notes:
        typer.echo(f"note: {note}", err=True)
    for fault in report.faults:
        typer.echo(f"FAULT {fault}", err=True)
    if report.faults:
        raise BundleError(f"{path}: {len(report.faults)} faults")
    typer.echo(f"{path}: ok ({report.sampled_rows} rows checked against the cache)")


@index_app.command("info")
def info(
    bundles: Annotated[Path, typer.Argument(help="bundle directory")],
    as_json: Annotated[bool, typer.Option("--json", help="print the current manifest")] = False,
) -> None:
    """Show the current version, its manifest summary, and every version kept."""
    store = BundleStore(bundles)
    if not store.root.is_dir():
        raise BundleError(f"bundle directory not found: {bundles}")
    current = store.current()
    if current is None:
        raise BundleError(f"{bundles} has no published bundle (no CURRENT)")
    manifest = read_manifest(store.root / current)
    if as_json:
        typer.echo(manifest.to_json().rstrip())
        return
    sources = manifest.artifacts
    typer.echo(
        f"current      {current} ({manifest.created_at})\n"
        f"rows         {manifest.rows} ({manifest.modality}), dim {manifest.dim}, "
        f"encoder {manifest.encoder or '-'}\n"
        f"source       {manifest.source.get('cache')}\n"
        f"grasp        {sources['grasp'].method} from {sources['grasp'].path}\n"
        f"cedar        {sources['cedar'].method} (k = {manifest.k}) from {sources['cedar'].path}\n"
        f"postings     {manifest.postings['concepts']} concepts, "
        f"{manifest.postings['entries']} entries\n"
        f"on disk      {format_bytes(sum(f.bytes for f in manifest.files.values()))}"
    )
    typer.echo("prefixes")
    for p in manifest.prefixes:
        disk = " (lists on disk)" if p.ondisk else ""
        typer.echo(f"  {p.length:>5} {p.granularity:<10} {p.factory}{disk}  [{p.reason}]")
    typer.echo("versions")
    for version in store.versions():
        state = (
            "CURRENT"
            if version.name == current
            else "unreadable"
            if version.manifest is None
            else "kept"
            if version.version < int(current[1:])
            else "not published"
        )
        detail = (
            f"{version.manifest.created_at}, {version.manifest.rows} rows"
            if version.manifest
            else "-"
        )
        typer.echo(f"  {version.name}  {state:<13} {detail}")
