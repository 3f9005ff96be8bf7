"""`strata index verify | info`: the commands that read a bundle and change nothing (registered
on the group in indexer/cli/index.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from indexer.cli.options import OldBundles, bundles_of
from indexer.format.footprint import footprint_lines
from indexer.format.index_plan import format_bytes
from indexer.format.manifest import BundleError, PrefixEntry, read_manifest
from indexer.verify.check import resolve_version, verify_bundle
from indexer.versions.bundle_store import BundleStore


def verify(
    old_bundles: OldBundles = None,
    bundles: Annotated[
        Path | None,
        typer.Option(
            "--bundles", help="bundle directory (checks CURRENT) or version", show_default=False
        ),
    ] = None,
    cache: Annotated[
        Path | None, typer.Option(help="source cache (default: the path the manifest records)")
    ] = None,
    sample: Annotated[int, typer.Option(help="rows recomputed from the cache", min=0)] = 64,
) -> None:
    """Check a bundle version: files, indexes, postings, ids, artifacts, rows vs the cache.

    Exit 0 and `ok`, or one FAULT line per problem (naming its file) and exit 2."""
    path = resolve_version(bundles_of(bundles, old_bundles))
    report = verify_bundle(path, cache_dir=cache, sample=sample)
    for note in report.notes:
        typer.echo(f"note: {note}", err=True)
    for fault in report.faults:
        typer.echo(f"FAULT {fault}", err=True)
    if report.faults:
        raise BundleError(f"{path}: {len(report.faults)} faults")
    typer.echo(f"{path}: ok ({report.sampled_rows} rows checked against the cache)")


def describe_source(source: dict) -> str:
    """Where a version's rows came from: a cache (build), or a base version and a change."""
    base = source.get("base", {}).get("name", "?")
    if source.get("operation") == "add":
        first = source.get("cache_first_row")
        return f"{base} + rows {first}.. from {source.get('cache')} (index add)"
    if source.get("operation") == "delete":
        return f"{base} − {source.get('deleted_rows')} rows (index delete)"
    return str(source.get("cache"))


def describe_tuning(entry: PrefixEntry) -> str:
    """One line: the search setting, its recall@k and latency as tuned (or why not)."""
    tuning = entry.tuning
    if tuning is None:
        exact = entry.factory == "Flat"
        return "exact search (recall 1)" if exact else f"search {entry.search or '-'}, not tuned"
    if tuning.status == "untuned":
        return f"search {entry.search or '-'}, not tuned: {tuning.note}"
    points = ", ".join(f"{p.search} {p.recall:.3f}" for p in tuning.points)
    return (
        f"search {entry.search}: recall@{tuning.k} {tuning.recall:.3f} "
        f"(target {tuning.target}, {tuning.status}), {tuning.latency_ms:.3f} ms/query; "
        f"tuned on {tuning.queries} held-out rows in {tuning.seconds:.1f} s; "
        f"operating points: {points}"
    )


def info(
    old_bundles: OldBundles = None,
    bundles: Annotated[
        Path | None, typer.Option("--bundles", help="bundle directory", show_default=False)
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the current manifest")] = False,
) -> None:
    """Show the current version, its manifest summary, and every version kept."""
    bundles = bundles_of(bundles, old_bundles)
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
        f"source       {describe_source(manifest.source)}\n"
        f"grasp        {sources['grasp'].method} from {sources['grasp'].path}\n"
        f"cedar        {sources['cedar'].method} (k = {manifest.k}) from {sources['cedar'].path}\n"
        f"postings     {manifest.postings['concepts']} concepts, "
        f"{manifest.postings['entries']} entries\n"
        f"on disk      {format_bytes(sum(f.bytes for f in manifest.files.values()))}"
    )
    shared = manifest.store
    kind = "none" if shared is None else shared["dtype"]
    where = ", on disk: read through mmap for reranks" if (shared or {}).get("on_disk") else ""
    typer.echo(f"store        {kind}{where} (bytes per row:)")
    typer.echo("\n".join(footprint_lines(manifest)))
    typer.echo("prefixes")
    for p in manifest.prefixes:
        disk = (
            " (lists on disk)" if p.ondisk
            else " (served from the store)" if p.store
            else " (codes reranked from the store)" if p.rerank
            else ""
        )  # fmt: skip
        typer.echo(f"  {p.length:>5} {p.granularity:<10} {p.factory}{disk}  [{p.reason}]")
        typer.echo(f"        {describe_tuning(p)}")
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
