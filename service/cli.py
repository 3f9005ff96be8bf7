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
from indexer.upgrade_cli import upgrade_command
from service.concepts_cli import concepts_app, explain_command
from service.demo import DemoConfig, DemoResult, run_demo
from service.search_cli import format_result, search_command, serve_command
from training.cli import embed_app, eval_app, format_summary, train_app
from training.core.errors import InputError
from training.core.settings import load_settings

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
app.command("upgrade")(upgrade_command)
app.add_typer(concepts_app, name="concepts")
app.command("explain")(explain_command)

DEMO = DemoConfig()


@app.command()
def demo(
    out: Annotated[
        Path | None, typer.Option(help="folder for every stage's output (default: runs/demo)")
    ] = None,
    scenes: Annotated[
        int, typer.Option(help="compositional scenes, when Flickr8k is absent", min=100)
    ] = DEMO.scenes,
    grasp_epochs: Annotated[int, typer.Option(help="GraSP-VL epochs", min=1)] = DEMO.grasp_epochs,
    cedar_epochs: Annotated[int, typer.Option(help="CEDAR epochs", min=1)] = DEMO.cedar_epochs,
    k: Annotated[int, typer.Option("--k", "-k", help="hits per example search", min=1)] = DEMO.k,
    progress: Annotated[bool, typer.Option(help="show progress bars")] = True,
) -> None:
    """The main job on the embedded default: embed real captions with MiniLM, train GraSP-VL
    and CEDAR, build the index bundle, serve it, and search at every granularity."""
    config = DemoConfig(
        scenes=scenes, grasp_epochs=grasp_epochs, cedar_epochs=cedar_epochs, k=k, progress=progress
    )
    with logging_redirect_tqdm():
        result = run_demo(load_settings(), config, out=out)
    typer.echo(format_demo(result))


def format_demo(result: DemoResult) -> str:
    """The demo's report: stages, then each example search as `strata search --explain` prints
    it, then the best caption hit explained prefix by prefix."""
    lines = [f"corpus       {result.corpus}", format_summary(result.summary)]
    lines += [f"{stage:<12} {what}" for stage, what in result.stages.items()]
    lines.append(f"bundle       {result.bundle}")
    lines.append(f"server       {result.target} (stopped after the searches)")
    for example in result.searches:
        search = example.search
        lines.append(f"\n=== {search.label}: {search.text!r}")
        if search.exclude:
            lines.append(f"exclude      {', '.join(search.exclude)}")
        if example.skipped:
            lines.append(f"note         {example.skipped}: searched without the filter")
        lines.append(format_result(example.result, ["caption"], explain=True))
    why = result.explanation
    if why is not None:
        lines.append(f"\n=== why {why.item_id} matches {result.explained_query!r}")
        lines.append(
            "cosine by prefix: "
            + ", ".join(
                f"{s.granularity.value} ({s.prefix_length}) {s.cosine:.3f}"
                for s in why.similarities
            )
        )
        shared = ", ".join(
            f"{c.name} ({c.label}) {c.contribution:.3f}" for c in why.shared_concepts[:6]
        )
        lines.append(f"shared concepts (contribution): {shared or 'none'}")
    return "\n".join(lines)


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
