"""The `strata` command: one subcommand group per pipeline stage, plus the demo.

Errors a user can act on (`InputError`) print as one line and exit 2; no traceback.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from tqdm.contrib.logging import logging_redirect_tqdm

from indexer.cli import index_app
from service.search_cli import search_command, serve_command
from training.cli import embed_app, eval_app, format_summary, train_app
from training.errors import InputError
from training.settings import load_settings

app = typer.Typer(
    name="strata",
    help="Strata: retrieval over vision-language embeddings by granularity and concept.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(embed_app, name="embed")
app.add_typer(train_app, name="train")
app.add_typer(eval_app, name="eval")
app.add_typer(index_app, name="index")
app.command("serve")(serve_command)
app.command("search")(search_command)


@app.command()
def demo(
    out: Annotated[Path | None, typer.Option(help="cache folder (default: runs/demo/...)")] = None,
    progress: Annotated[bool, typer.Option(help="show progress bars")] = True,
) -> None:
    """The main job on the embedded default: embed real captions with MiniLM, query the cache."""
    from service.demo import run_demo

    with logging_redirect_tqdm():
        result = run_demo(load_settings(), out=out, progress=progress)
    typer.echo(f"corpus       {result.corpus}")
    typer.echo(format_summary(result.summary))
    for query, hits in result.neighbours.items():
        typer.echo(f"\nquery: {query}")
        for score, caption in hits:
            typer.echo(f"  {score:.3f}  {caption}")


def main() -> None:
    settings = load_settings()
    logging.basicConfig(
        level=settings.log_level, format="strata: %(levelname)s: %(name)s: %(message)s"
    )
    try:
        app()
    except InputError as exc:
        typer.echo(f"strata: error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("strata: interrupted (an embed job resumes when rerun)", err=True)
        sys.exit(130)
