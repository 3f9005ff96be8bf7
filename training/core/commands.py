"""Command groups whose commands load on first use, so `strata --help` imports no stage.

A group lists each lazy command with its one-line help (what `--help` shows); the module that
defines the command (a typer function or a typer group) is imported only when that command
runs or its own help is asked for. Every command carries examples in its help (`examples`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    import click  # the types; typer runs its own copy of click

# `--seed` of every command that trains: laid over the config's `seed` (load_config overrides)
SeedOption = Annotated[
    int | None,
    typer.Option(help="seed of everything the run draws (default: the config's seed)", min=0),
]


@dataclass(frozen=True)
class LazyCommand:
    """`target` is "module:attribute": a command function or a `typer.Typer` group."""

    name: str
    target: str
    help: str
    epilog: str | None = None


def examples(*lines: str) -> str:
    """A help epilog of example command lines, kept as written (click's \\b: no rewrapping)."""
    return "Examples:\n\n\b\n" + "\n".join(f"  {line}" for line in lines)


def load_command(entry: LazyCommand) -> click.Command:
    """The click command of `entry.target`, built as the eager groups build theirs."""
    module, _, attribute = entry.target.partition(":")
    target = getattr(importlib.import_module(module), attribute)
    if isinstance(target, typer.Typer):
        target.rich_markup_mode = None
        target._add_completion = False
        command = typer.main.get_group(target)
    else:
        holder = typer.Typer(rich_markup_mode=None, add_completion=False)
        holder.command(entry.name, epilog=entry.epilog)(target)
        command = typer.main.get_command(holder)
    command.name = entry.name
    return command


class LazyCommands(MutableMapping[str, "click.Command"]):
    """A group's commands: the eager ones, and the lazy ones, loaded when first looked up."""

    def __init__(self, eager: MutableMapping[str, click.Command], lazy: list[LazyCommand]):
        self.eager = eager
        self.lazy = {entry.name: entry for entry in lazy}

    def loaded(self, name: str) -> click.Command | None:
        return self.eager.get(name)

    def __getitem__(self, name: str) -> click.Command:
        if name not in self.eager and name in self.lazy:
            self.eager[name] = load_command(self.lazy[name])
        return self.eager[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self.eager[name] = command

    def __delitem__(self, name: str) -> None:
        self.eager.pop(name, None)
        self.lazy.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        yield from self.eager
        yield from (name for name in self.lazy if name not in self.eager)

    def __len__(self) -> int:
        return len(set(self.eager) | set(self.lazy))


def lazy_group(*entries: LazyCommand) -> type[TyperGroup]:
    """A TyperGroup class (`typer.Typer(cls=...)`) that also holds `entries`, loaded lazily."""

    class LazyGroup(TyperGroup):
        def __init__(self, **attrs: Any) -> None:
            super().__init__(**attrs)
            self.commands = LazyCommands(self.commands, list(entries))

        def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
            commands = self.commands
            assert isinstance(commands, LazyCommands)
            names = list(commands)
            limit = formatter.width - 6 - max((len(name) for name in names), default=0)
            rows = []
            for name in names:
                command = commands.loaded(name)
                if command is None:
                    rows.append((name, commands.lazy[name].help))
                elif not command.hidden:
                    rows.append((name, command.get_short_help_str(limit)))
            if rows:
                with formatter.section("Commands"):
                    formatter.write_dl(rows)

    return LazyGroup


class HiddenArgumentsCommand(TyperCommand):
    """A command whose hidden arguments (an old positional form, still accepted) stay out of
    its usage line too."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if not (param.param_type_name == "argument" and getattr(param, "hidden", False)):
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces
