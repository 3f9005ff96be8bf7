"""MkDocs hook: the benchmark figures of the site, made at build time from committed result files.

Every figure the site shows comes from a file a command wrote: a benchmark writes its result in
the envelope of benchmarks/harness.py (`publish`: the command as run, the machine, the date, the
figures), and the results that back the site are committed as benchmarks/results/NAME.json.
benchmarks/catalog.toml lists the benchmarks the site shows, each with its section, title, what
it measures, the command that makes its file, roughly how long that takes, and which figures of
the file its table shows: `columns`, and `rows` of a label and the figures' paths (keys joined
by `/`; an empty path leaves its cell blank), or `records`, the path of a list of like
records, and the `fields` of each to show.
Two placeholders, each a line of its own:

- `<!-- results: SECTION -->`: every benchmark of that section, its table with the command as
  run, the machine and the date, or, where no file is committed, its command and run time;
- `<!-- result: NAME -->`: one benchmark's table and where it comes from, linked to its entry
  on the benchmarks page (an explanation page's one current figure).

A path that names no figure of its file, a section or name the catalog lacks, and a table cell
over 300 characters fail the build. mkdocs.yml names this file under `hooks:`.
"""

from __future__ import annotations

import json
import posixpath
import re
import tomllib
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "benchmarks" / "catalog.toml"
RESULTS = ROOT / "benchmarks" / "results"
RESULT_FORMAT = "strata.benchmark-result/1"  # benchmarks/harness.py writes it
BENCHMARKS_PAGE = "benchmarks.md"
MAX_CELL = 300
PLACEHOLDER = re.compile(r"^<!-- (results?): ([\w-]+) -->$", re.MULTILINE)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    """Replace each results placeholder of the page with its tables."""
    try:
        return expand(markdown, page.file.src_uri)
    except ValueError as error:
        raise PluginError(f"{page.file.src_uri}: {error}") from error


def expand(markdown: str, page: str, catalog: dict[str, dict] | None = None) -> str:
    """The page's Markdown with every placeholder replaced (`page`: its path under docs/)."""
    entries = load_catalog() if catalog is None else catalog

    def replaced(match: re.Match[str]) -> str:
        kind, key = match.groups()
        if kind == "results":
            chosen = [name for name, entry in entries.items() if entry["section"] == key]
            if not chosen:
                raise ValueError(f"no benchmark of the catalog is in section '{key}'")
            return "\n".join(section_entry(name, entries[name]) for name in chosen)
        if key not in entries:
            raise ValueError(f"no benchmark '{key}' in {CATALOG.name}")
        return figure(key, entries[key], page)

    return PLACEHOLDER.sub(replaced, markdown)


def load_catalog(path: Path = CATALOG) -> dict[str, dict]:
    """The catalog's benchmarks by name, in its order, each checked for its fields."""
    entries = tomllib.loads(path.read_text())
    for name, entry in entries.items():
        missing = {"section", "title", "what", "command", "cost"} - set(entry)
        if missing:
            raise ValueError(f"{path.name}: [{name}] lacks {', '.join(sorted(missing))}")
    return entries


def load_result(name: str, results: Path = RESULTS) -> dict[str, Any] | None:
    """The committed result of a benchmark, or None where none is committed."""
    path = results / f"{name}.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    if data.get("format") != RESULT_FORMAT:
        raise ValueError(f"{path.name} is not a {RESULT_FORMAT} file (benchmarks/harness.py)")
    return data


def section_entry(name: str, entry: dict, results: Path = RESULTS) -> str:
    """A benchmark on the benchmarks page: its heading (anchor: its name), what it measures,
    then its table and provenance, or the command to run where it has no current result."""
    lines = [f"### {entry['title']} {{#{name}}}", "", entry["what"], ""]
    result = load_result(name, results)
    if result is None:
        lines += [
            f"No current result. The command below writes `benchmarks/results/{name}.json`; "
            f"it takes {entry['cost']}.",
            "",
            "```bash",
            entry["command"],
            "```",
            "",
        ]
        return "\n".join(lines)
    return "\n".join([*lines, table(entry, result), "", provenance(result), ""])


def figure(name: str, entry: dict, page: str, results: Path = RESULTS) -> str:
    """One benchmark's current figure on another page, linked to its entry."""
    link = posixpath.relpath(BENCHMARKS_PAGE, posixpath.dirname(page) or ".") + f"#{name}"
    result = load_result(name, results)
    if result is None:
        return (
            f"No current result of [{entry['title']}]({link}): `{entry['command']}` writes "
            f"it, in {entry['cost']}.\n"
        )
    return "\n".join(
        [table(entry, result), "", provenance(result) + f" · [{entry['title']}]({link})", ""]
    )


def provenance(result: dict[str, Any]) -> str:
    """Where a figure comes from: the command as run, the machine, the date."""
    return f"`{result['command']}` · {machine_text(result['machine'])} · {result['date'][:10]}"


def machine_text(machine: dict[str, Any]) -> str:
    text = f"{machine['cores']} cores of {machine['cpu']}"
    if machine.get("memory_gib") is not None:
        text += f", {machine['memory_gib']:g} GiB"
    return text + (f", {machine['gpu']}" if machine.get("gpu") else ", no GPU")


def table(entry: dict, result: dict[str, Any]) -> str:
    """The figures the catalog picks from the result, as a Markdown table (without `rows`: every
    scalar figure of the file, by its path)."""
    figures = result["figures"]
    if "records" in entry:  # a list of like records, one row each
        columns = entry.get("columns", entry["fields"])
        records = lookup(figures, entry["records"])
        rows = [[value_text(lookup(r, field)) for field in entry["fields"]] for r in records]
    elif "rows" in entry:
        columns = entry.get("columns", ["figure", "value"])
        rows = [
            [label, *(value_text(lookup(figures, p)) if p else "–" for p in paths)]
            for label, *paths in entry["rows"]
        ]
    else:
        columns = ["figure", "value"]
        rows = [[path, value_text(value)] for path, value in scalars(figures)]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(
                f"{entry['title']}: a row of {len(row)} cells under {len(columns)} columns"
            )
        for cell in row:
            if len(cell) > MAX_CELL:
                raise ValueError(
                    f"{entry['title']}: a cell of {len(cell)} characters: {cell[:60]}…"
                )
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    return "\n".join(lines)


def lookup(figures: Any, path: str) -> Any:
    """The figure at `path` (keys, or list positions, joined by `/`)."""
    value = figures
    for key in path.split("/"):
        if (
            isinstance(value, list)
            and key.lstrip("-").isdigit()
            and -len(value) <= int(key) < len(value)
        ):
            value = value[int(key)]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            raise ValueError(f"no figure '{path}' in the result (at '{key}')")
    return value


def scalars(figures: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every scalar figure with its path, depth first; lists of scalars count as one."""
    if isinstance(figures, dict):
        found = []
        for key, value in figures.items():
            found += scalars(value, f"{prefix}/{key}" if prefix else str(key))
        return found
    if isinstance(figures, list) and any(isinstance(v, (dict, list)) for v in figures):
        found = []
        for i, value in enumerate(figures):
            found += scalars(value, f"{prefix}/{i}")
        return found
    return [(prefix, figures)]


def value_text(value: Any) -> str:
    """A figure as the tables print it: integers with thousands separators, decimals to three
    places below 10 (two below 100, one below 1,000, none above), lists joined."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        size = abs(value)
        if size != 0 and size < 0.001:
            return f"{value:.1e}"
        places = 3 if size < 10 else 2 if size < 100 else 1 if size < 1000 else 0
        return f"{value:,.{places}f}"
    if isinstance(value, list):
        return ", ".join(value_text(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {value_text(v)}" for k, v in value.items())
    return " ".join(str(value).split())
