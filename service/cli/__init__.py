"""The `strata` command: one subcommand group per pipeline stage, plus the demo.

Each stage's commands load when they run (training/core/commands.py), so `strata --help` and
`strata search` import no torch, FAISS, POT or scikit-learn. Every failure a user can cause
prints one line, `strata: error: …`, and exits non-zero (2: bad input or usage); no traceback.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated

import typer

from training.core.commands import LazyCommand, examples, lazy_group
from training.core.errors import InputError

STRATA_LOGGERS = ("training", "indexer", "service", "strata")

EMBED_HELP = "Embed a corpus into a cache, import embeddings made elsewhere, inspect caches."
TRAIN_HELP = "Learn transforms (GraSP-VL, CEDAR, CoSAE) from an embedding cache."
EVAL_HELP = "Score transforms and their baselines with the project's metrics."
INDEX_HELP = "Build, update, publish, verify and inspect index bundles."
COMMANDS = [
    LazyCommand("embed", "training.cli:embed_app", EMBED_HELP),
    LazyCommand("train", "training.cli:train_app", TRAIN_HELP),
    LazyCommand("eval", "training.cli:eval_app", EVAL_HELP),
    LazyCommand("index", "indexer.cli.index:index_app", INDEX_HELP),
    LazyCommand(
        "serve",
        "service.cli.serve:serve_command",
        "Serve a bundle over gRPC until Ctrl-C.",
        examples(
            "strata serve --bundles runs/demo/bundles-flickr8k",
            "strata serve --bundles runs/demo/bundles-flickr8k --port 50052 --http-port 8080 "
            "--workers 1 --device cpu",
            "strata serve --bundles runs/demo/bundles-flickr8k --redis-url redis://127.0.0.1:6379/0",
        ),
    ),
    LazyCommand(
        "search",
        "service.cli.search:search_command",
        "Search a running server and print its hits.",
        examples(
            'strata search "a dog runs on the beach"',
            'strata search "a red car" --top-k 5 --granularity object --explain',
            'strata search "a dog" --require dog --exclude beach --json',
            "strata search --image photo.jpg --target 127.0.0.1:50051",
        ),
    ),
    LazyCommand(
        "concepts",
        "service.cli.concepts:concepts_app",
        "Find CEDAR concepts by name: list, search, show (a bundle or a server).",
    ),
    LazyCommand(
        "explain",
        "service.cli.concepts:explain_command",
        "Explain why an item matches a query, against a running server.",
        examples(
            'strata explain "a red dog" --id 2059616165_b7c99c1009.jpg#0',
            'strata explain "a dog on the beach" --row 17 --target 127.0.0.1:50051',
        ),
    ),
    LazyCommand(
        "demo",
        "service.cli.demo_command:demo",
        "The main job: embed, train, index, serve and search.",
        examples("strata demo", "strata demo --top-k 10 --no-progress"),
    ),
    LazyCommand(
        "upgrade",
        "indexer.cli.upgrade:upgrade_command",
        "Fit a query translator: serve a bundle to queries of a newer model.",
        examples(
            "strata embed run --corpus flickr8k --encoder minilm@layer:3 --out runs/flickr8k-l3",
            "strata upgrade --bundles runs/demo/bundles-flickr8k --cache-b runs/flickr8k-l3 "
            "--paired-fraction 0.1 --out runs/translator",
        ),
    ),
]

app = typer.Typer(
    name="strata",
    help="Strata: retrieval over vision-language embeddings by granularity and concept.",
    epilog=examples(
        "strata demo",
        "strata serve --bundles runs/demo/bundles-flickr8k",
        'strata search "a dog runs on the beach" --top-k 5',
        "strata index info --bundles runs/demo/bundles-flickr8k",
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
    from training.core.settings import load_settings  # pydantic: only once a command runs

    configure_logging("WARNING" if quiet else load_settings().log_level)


def configure_logging(level: str, process: str = "strata") -> None:
    """Strata's own loggers at `level` (STRATA_LOG_LEVEL; -q: WARNING); every other library's
    at WARNING, so their INFO lines stay out of the output. `process` begins each line (a
    worker of `strata serve --workers` names itself)."""
    logging.basicConfig(
        level=logging.WARNING, format=f"{process}: %(levelname)s: %(name)s: %(message)s"
    )
    for name in STRATA_LOGGERS:
        logging.getLogger(name).setLevel(level)


def main() -> None:
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # gRPC's C core logs to stderr otherwise
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
