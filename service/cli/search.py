"""`strata search`: a query against a running server, its hits printed (or as JSON)."""

from __future__ import annotations

import json
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
from training.core.errors import InputError

DEFAULT_TARGET = "127.0.0.1:50051"
TEXT_WIDTH = 60


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


def _scoped(name: str, scope: str | None, zero_shot: bool = False) -> str:
    """A concept's name with its CDS scope marked: 'dog·L' local, 'beach·G' global; a zero-shot
    word's with a '*': 'giraffe*'."""
    name = f"{name}*" if zero_shot else name
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
        made = ", ".join(
            f"{'not ' if f.role == 'exclude' else ''}{f.reference}: {f.made}"
            for f in result.filter_concepts
        )
        lines.append(
            f"filter       {result.filtered_rows} rows allowed" + (f" ({made})" if made else "")
        )
    lines += [f"warning      {w}" for w in result.warnings]
    if explain and result.query_concepts:
        strongest = sorted(result.query_concepts, key=lambda c: -c.activation)
        names = [concept_text(c.name, c.label, c.zero_shot) for c in strongest]
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
            row.append(", ".join(_scoped(c.name, c.scope, c.zero_shot) for c in hit.concepts))
            shared = [
                f"{_scoped(s.name, s.scope, s.zero_shot)} ({s.contribution:.3f})"
                for s in hit.shared_concepts
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
