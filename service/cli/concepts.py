"""`strata concepts list | search | show` (the CEDAR catalog) and `strata explain` (why an item
matches a query).

The concepts commands read a bundle folder in this process (`--bundles DIR`, through
`service.engine.catalog.BundleCatalog`) or a running server (`--target HOST:PORT`, through
`StrataClient`): both answer `list_concepts` / `get_concept` with the same dataclasses, so
every listing below is computed and printed by one code path. An unknown name is answered by
the catalog itself (`ConceptCoder.resolve`) with its near misses, so `strata search --require`
and `strata concepts show` suggest the same names. `strata explain` asks a running server.

Nothing heavy is imported at module level: a bundle (FAISS, the coder) is opened only inside
the command that reads one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Protocol

import typer

from service.api.grpc.client import StrataClient
from service.cli.concept_views import (
    concept_details,
    concept_table,
    concepts_json,
    format_explanation,
)
from service.results import ConceptInfo, ConceptPage, ConceptRef
from training.cedar.near_misses import NEAR_CUTOFF, near_misses
from training.core.commands import examples
from training.core.errors import InputError

DEFAULT_TARGET = "127.0.0.1:50051"
PAGE = 1000  # ListConcepts' largest page
SORTS = ("id", "score", "frequency", "rows")

concepts_app = typer.Typer(
    help="The CEDAR concept catalog: names, scores, scope, top examples.\n\n"
    "Reads a bundle folder (--bundles DIR, offline) or a running server (--target HOST:PORT).",
    no_args_is_help=True,
)


class ConceptSource(Protocol):
    """What the concepts commands read: `StrataClient` and `BundleCatalog` both are one."""

    def list_concepts(
        self,
        name_contains: str = "",
        page_size: int = 0,
        page_token: str = "",
        include_below_floor: bool = False,
    ) -> ConceptPage: ...

    def get_concept(self, concept: ConceptRef | str | int) -> list[ConceptInfo]: ...


BundlesOption = Annotated[
    Path | None,
    typer.Option(
        "--bundles", help="bundle directory (its CURRENT version) or a version folder, offline"
    ),
]
TargetOption = Annotated[
    str | None,
    typer.Option(help=f"a running server host:port (the default, {DEFAULT_TARGET})"),
]
TimeoutOption = Annotated[float, typer.Option(help="seconds to wait for the server")]
JsonOption = Annotated[bool, typer.Option("--json", help="print the concepts as JSON")]
BelowFloorOption = Annotated[
    bool,
    typer.Option(
        "--below-floor",
        help="list the concepts below the catalog's precision floor too (explanations never "
        "show them)",
    ),
]


@contextmanager
def open_source(
    bundles: Path | None, target: str | None, timeout: float = 30.0
) -> Iterator[tuple[ConceptSource, str]]:
    """The catalog to read and how to name it: a bundle folder read here, or a server."""
    if bundles is not None and target is not None:
        raise InputError("give --bundles DIR or --target HOST:PORT, not both")
    if bundles is not None:
        from indexer.format.bundle import Bundle
        from service.engine.catalog import BundleCatalog

        bundle = Bundle.open(bundles)
        yield BundleCatalog(bundle), f"bundle {bundle.path}"
        return
    where = target or DEFAULT_TARGET
    with StrataClient(where, timeout=timeout) as client:
        yield client, f"server {where}"


def all_concepts(
    source: ConceptSource, name_contains: str = "", below_floor: bool = False
) -> list[ConceptInfo]:
    """Every concept of the catalog that holds (with `below_floor`, every one), whose name
    contains `name_contains`, in id order."""
    found: list[ConceptInfo] = []
    token = ""
    while True:
        page = source.list_concepts(name_contains, PAGE, token, below_floor)
        found += page.concepts
        token = page.next_page_token
        if not token:
            return found


def sorted_concepts(concepts: Sequence[ConceptInfo], by: str) -> list[ConceptInfo]:
    """Concepts by id, or best first by score, frequency or active rows."""
    keys = {
        "id": lambda c: c.id,
        "score": lambda c: -c.score,
        "frequency": lambda c: -c.frequency,
        "rows": lambda c: -c.active_rows,
    }
    if by not in keys:
        raise InputError(f"--sort must be one of {', '.join(SORTS)}, got {by!r}")
    return sorted(concepts, key=keys[by])


def matching_concepts(
    concepts: Sequence[ConceptInfo], text: str, most: int
) -> list[tuple[ConceptInfo, str]]:
    """Concepts for a search text, with why each matched: its name contains the text, then a
    runner-up does, then near misses (training.cedar.near_misses) — at most `most` (0: all)."""
    key = text.strip().lower()
    if not key:
        raise InputError("give a text to search concept names for")
    found: list[tuple[ConceptInfo, str]] = []
    seen: set[int] = set()
    for concept in sorted(concepts, key=lambda c: -c.score):
        if key in concept.name.lower():
            found.append((concept, "name"))
            seen.add(concept.id)
    for concept in sorted(concepts, key=lambda c: -c.score):
        if concept.id in seen:
            continue
        hit = next((w for w, _ in concept.runner_ups if key in w.lower()), None)
        if hit is not None:
            found.append((concept, f"runner-up {hit}"))
            seen.add(concept.id)
    rest = [c for c in concepts if c.id not in seen and c.name.lower() != key]
    for concept, similarity, via in near_misses(rest, key, len(rest), NEAR_CUTOFF):
        why = f"runner-up {via} ≈" if via else "name ≈"
        found.append((concept, f"{why} {similarity:.2f}"))
    return found[:most] if most else found


# --- the commands ---


@concepts_app.command(
    "list",
    epilog=examples(
        "strata concepts list --bundles runs/demo/bundles-flickr8k --sort score --limit 20",
        "strata concepts list --target 127.0.0.1:50051 --scope local",
    ),
)
def list_command(
    bundles: BundlesOption = None,
    target: TargetOption = None,
    sort: Annotated[str, typer.Option(help="order: " + " | ".join(SORTS))] = "id",
    scope: Annotated[
        str | None, typer.Option(help="only concepts of this CDS scope: local | global")
    ] = None,
    limit: Annotated[int, typer.Option(help="concepts to show at most (0: all)", min=0)] = 50,
    below_floor: BelowFloorOption = False,
    as_json: JsonOption = False,
    timeout: TimeoutOption = 30.0,
) -> None:
    """List the catalog: label, name, score, scope, frequency, active rows, top example.

    Only the concepts that hold (held-out precision at or above the catalog's floor), as
    explanations show them, unless --below-floor.
    """
    if scope is not None and scope not in ("local", "global"):
        raise InputError(f"--scope must be local or global, got {scope!r}")
    if sort not in SORTS:
        raise InputError(f"--sort must be one of {', '.join(SORTS)}, got {sort!r}")
    with open_source(bundles, target, timeout) as (source, where):
        concepts = all_concepts(source, below_floor=below_floor)
    if scope is not None:
        concepts = [c for c in concepts if c.scope == scope]
    concepts = sorted_concepts(concepts, sort)
    shown = concepts[:limit] if limit else concepts
    if as_json:
        typer.echo(concepts_json(shown))
        return
    scoped = f" of scope {scope}" if scope else ""
    typer.echo(f"{len(concepts)} concepts{scoped} in {where}, by {sort}")
    if shown:
        typer.echo(concept_table(shown))
    if len(shown) < len(concepts):
        typer.echo(f"… {len(concepts) - len(shown)} more (--limit 0 shows all)")


@concepts_app.command(
    "search",
    epilog=examples(
        "strata concepts search dog --bundles runs/demo/bundles-flickr8k",
        "strata concepts search zebra --target 127.0.0.1:50051",
    ),
)
def search_command(
    text: Annotated[str, typer.Argument(help="a word or part of a name")],
    bundles: BundlesOption = None,
    target: TargetOption = None,
    limit: Annotated[int, typer.Option(help="concepts to show at most (0: all)", min=0)] = 20,
    below_floor: BelowFloorOption = False,
    as_json: JsonOption = False,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Find concepts by name, runner-up or near miss (those that hold, unless --below-floor).

    Names containing TEXT come first, then concepts with a runner-up containing it, then near
    misses (a typo, a plural), each group best score first.
    """
    if not text.strip():
        raise InputError("give a text to search concept names for")
    with open_source(bundles, target, timeout) as (source, where):
        concepts = all_concepts(source, below_floor=below_floor)
    found = matching_concepts(concepts, text, limit)
    if as_json:
        typer.echo(concepts_json([c for c, _ in found]))
        return
    if not found:
        typer.echo(f"no concept name in {where} contains or is near {text.strip()!r}")
        return
    typer.echo(f"concepts matching {text.strip()!r} in {where}")
    typer.echo(concept_table([c for c, _ in found], [why for _, why in found]))


@concepts_app.command(
    "show",
    context_settings={"ignore_unknown_options": True},
    epilog=examples(
        "strata concepts show dog --bundles runs/demo/bundles-flickr8k",
        "strata concepts show +12 --target 127.0.0.1:50051",
    ),
)
def show_command(
    concept: Annotated[
        str,
        typer.Argument(
            help="a name (every concept so named) or a label (+12, -3; a bare 12 is +12)"
        ),
    ],
    bundles: BundlesOption = None,
    target: TargetOption = None,
    as_json: JsonOption = False,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Show a concept in full, or every concept so named.

    Score, precision, scope, frequency, active rows, runner-ups and top examples. An unknown
    name fails with the names near it. A negative label needs no `--` (`show -3`).
    """
    with open_source(bundles, target, timeout) as (source, _):
        found = source.get_concept(concept)
    if as_json:
        typer.echo(concepts_json(found))
        return
    typer.echo("\n\n".join(concept_details(c) for c in found))


def explain_command(
    query: Annotated[str | None, typer.Argument(help="the text query")] = None,
    item_id: Annotated[str | None, typer.Option("--id", help="the item's id")] = None,
    row: Annotated[int | None, typer.Option(help="the item's row in the bundle", min=0)] = None,
    image: Annotated[
        Path | None, typer.Option(help="an image file as the query, instead of text")
    ] = None,
    concepts: Annotated[
        int, typer.Option(help="shared concepts to list at most (0: all)", min=0)
    ] = 10,
    captions: Annotated[
        int,
        typer.Option(
            help="gallery captions nearest to each code's reconstruction, in the description",
            min=0,
            max=20,
        ),
    ] = 3,
    target: Annotated[str, typer.Option(help="server address host:port")] = DEFAULT_TARGET,
    as_json: JsonOption = False,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Explain why an item matches a query, against a running server.

    The cosine at every prefix of the contract, and the CEDAR concepts the two share with
    their contributions.
    """
    if (query is None) == (image is None):
        raise InputError("give a text QUERY or --image FILE (one of them)")
    if (item_id is None) == (row is None):
        raise InputError("name the item: --id ID or --row N (one of them)")
    with StrataClient(target, timeout=timeout) as client:
        why = client.explain(query, item_id=item_id, row=row, image=image, near_captions=captions)
    if as_json:
        typer.echo(json.dumps(asdict(why), indent=2, default=str))
        return
    typer.echo(format_explanation(why, concepts))
