"""The `strata` command: one subcommand group per pipeline stage, plus the demo.

Each stage's commands load when they run (training/core/commands.py), so `strata --help` and
`strata search` import no torch, FAISS, POT or scikit-learn. Every failure a user can cause
prints one line, `strata: error: …`, and exits non-zero (2: bad input or usage); no traceback.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from service.demo_config import DemoConfig
from service.search_cli import format_result
from training.cli import format_summary
from training.core.commands import LazyCommand, examples, lazy_group
from training.core.errors import InputError
from training.core.settings import load_settings

if TYPE_CHECKING:
    from service.demo import DemoResult

STRATA_LOGGERS = ("training", "indexer", "service", "strata")

EMBED_HELP = "Embed a corpus into an embedding cache, and inspect caches."
TRAIN_HELP = "Learn transforms (GraSP-VL, CEDAR, CoSAE) from an embedding cache."
EVAL_HELP = "Score transforms and their baselines with the project's metrics."
INDEX_HELP = "Build, update, publish, verify and inspect index bundles."
COMMANDS = [
    LazyCommand("embed", "training.cli:embed_app", EMBED_HELP),
    LazyCommand("train", "training.cli:train_app", TRAIN_HELP),
    LazyCommand("eval", "training.cli:eval_app", EVAL_HELP),
    LazyCommand("index", "indexer.cli:index_app", INDEX_HELP),
    LazyCommand(
        "serve",
        "service.search_cli:serve_command",
        "Serve a bundle over gRPC until Ctrl-C.",
        examples(
            "strata serve --bundles runs/demo/bundle",
            "strata serve --bundles runs/demo/bundle --port 50052 --device cpu",
            "strata serve --bundles runs/demo/bundle --redis-url redis://127.0.0.1:6379/0",
        ),
    ),
    LazyCommand(
        "search",
        "service.search_cli:search_command",
        "Search a running server and print its hits.",
        examples(
            'strata search "a dog runs on the beach"',
            'strata search "a red car" --top-k 5 --granularity object --explain',
            'strata search "a dog" --require dog --exclude beach --json',
            "strata search --image photo.jpg --target 127.0.0.1:50051",
        ),
    ),
    LazyCommand(
        "upgrade",
        "indexer.upgrade_cli:upgrade_command",
        "Fit a query translator: serve a bundle to queries of a newer model.",
        examples("strata upgrade --help"),
    ),
]

app = typer.Typer(
    name="strata",
    help="Strata: retrieval over vision-language embeddings by granularity and concept.",
    epilog=examples(
        "strata demo",
        'strata search "a dog runs on the beach" --top-k 5',
        "strata index info --bundles runs/demo/bundle",
        "strata train cedar --help",
    ),
    cls=lazy_group(*COMMANDS),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("strata")
    except PackageNotFoundError:
        return "unknown (not installed)"


def show_version(value: bool) -> None:
    if value:
        typer.echo(f"strata {package_version()}")
        raise typer.Exit()


@app.callback()
def options(
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="print warnings and errors only, no INFO lines")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="print the version and exit", callback=show_version, is_eager=True
        ),
    ] = False,
) -> None:
    """Strata: retrieval over vision-language embeddings by granularity and concept."""
    if quiet:
        for name in STRATA_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


DEMO = DemoConfig()


@app.command(epilog=examples("strata demo", "strata demo --out runs/demo2 --scenes 2000"))
def demo(
    out: Annotated[
        Path | None, typer.Option(help="folder for every stage's output (default: runs/demo)")
    ] = None,
    scenes: Annotated[
        int, typer.Option(help="compositional scenes, when Flickr8k is absent", min=100)
    ] = DEMO.scenes,
    grasp_epochs: Annotated[int, typer.Option(help="GraSP-VL epochs", min=1)] = DEMO.grasp_epochs,
    cedar_epochs: Annotated[int, typer.Option(help="CEDAR epochs", min=1)] = DEMO.cedar_epochs,
    k: Annotated[
        int, typer.Option("--top-k", "-k", help="hits per example search", min=1)
    ] = DEMO.k,
    progress: Annotated[bool, typer.Option(help="show progress bars")] = True,
) -> None:
    """The main job on the embedded default: embed real captions with MiniLM, train GraSP-VL
    and CEDAR, build the index bundle, serve it, and search at every granularity."""
    from tqdm.contrib.logging import logging_redirect_tqdm

    from service.demo import run_demo

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


def configure_logging(level: str) -> None:
    """Strata's own loggers at `level` (STRATA_LOG_LEVEL; -q: WARNING); every other library's
    at WARNING, so their INFO lines stay out of the output."""
    logging.basicConfig(
        level=logging.WARNING, format="strata: %(levelname)s: %(name)s: %(message)s"
    )
    for name in STRATA_LOGGERS:
        logging.getLogger(name).setLevel(level)
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # gRPC's C core logs to stderr otherwise


def main() -> None:
    configure_logging(load_settings().log_level)
    try:
        code = app(standalone_mode=False, prog_name="strata")
    except InputError as exc:
        fail(str(exc), 2)
    except typer.TyperException as exc:  # typer's click: usage errors, bad values, …
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group: its help
            typer.echo(exc.format_message())
            sys.exit(0)
        context = getattr(exc, "ctx", None)
        hint = f" (see {context.command_path} --help)" if context is not None else ""
        fail(f"{exc.format_message()}{hint}", getattr(exc, "exit_code", 2))
    except typer.Abort:
        fail("aborted", 1)
    except KeyboardInterrupt:
        typer.echo("strata: interrupted (an embed job resumes when rerun)", err=True)
        sys.exit(130)
    if code == 130:
        typer.echo("strata: interrupted (an embed job resumes when rerun)", err=True)
    sys.exit(code if isinstance(code, int) else 0)


def fail(message: str, code: int) -> None:
    """The one error line: `strata: error: …` (one line, whatever the message held)."""
    line = " ".join(message.split())
    typer.echo(f"strata: error: {line}", err=True)
    sys.exit(code)
