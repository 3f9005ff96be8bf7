"""The manual's pages stay plain: short pages, short table cells, today's behaviour only.

A user reads a page for what is true now, with one current figure and its command; how a figure
came to be belongs to git. So, on every page of docs/ (its Markdown source, before the build adds
the generated references and benchmark tables):

- at most MAX_LINES lines and MAX_CHARS characters, and no table cell over MAX_CELL characters;
- no commit hash and no date (a figure's date is its result file's, which the build shows);
- outside docs/development/, no sentence about the machine, the session or the earlier run
  behind a figure (RUN_TALK), and no path of a source file (`service/cli/concepts.py`): a user
  page names commands, options and Python entry points, the development pages name files;
- the whole site at most MAX_SITE characters.

The README is the door, not a page of the manual: at most README_LINES lines, and its two set-up
commands are the ones CI runs. Run this file as a script for the site's table of contents with
each page's characters and lines:

    python tests/docs/test_plain_pages.py
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MAX_LINES, MAX_CHARS, MAX_CELL, MAX_SITE = 300, 30_000, 300, 200_000
README_LINES = 150
DEVELOPMENT = "development/"

HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
ORDINAL = r"(?:second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|slower|faster|quiet)"
RUN_TALK = [
    re.compile(p, re.IGNORECASE)
    for p in (
        rf"\b(?:this|that|the next|the last|the same|another|a {ORDINAL}) (?:machine|session)\b",
        r"\b(?:shared|development|2-core|two-core) machine\b",
        r"\bearlier runs?\b",
        r"\b(?:re)?run at\b",
        r"\bbefore → after\b",
        r"\((?:before|ablation)\)",
        r"\bthe commit before\b",
    )
]
# a path of a source file or package folder: Python modules, tests, the benchmarks' code
SOURCE_PATH = re.compile(r"(?<![\w./-])((?:service|indexer|training|tests|benchmarks)/[\w./{}-]*)")
USER_FILES = re.compile(r"^(?:training/\w+/configs/|benchmarks/results/|benchmarks/catalog\.toml)")


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts)


def name(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


def prose(text: str) -> str:
    """The page without its fenced code blocks (commands and output may name anything)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def table_cells(text: str) -> list[str]:
    """Every cell of every Markdown table row (a line starting with `|`)."""
    cells = []
    for line in prose(text).splitlines():
        if line.startswith("|"):
            cells += [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
    return cells


def faults(text: str, page: str) -> list[str]:
    """Why the text of a page (its path under docs/) is not plain, or nothing."""
    found = []
    lines = text.count("\n") + (not text.endswith("\n"))
    if lines > MAX_LINES:
        found.append(f"{lines} lines (at most {MAX_LINES})")
    if len(text) > MAX_CHARS:
        found.append(f"{len(text):,} characters (at most {MAX_CHARS:,})")
    found += [
        f"a table cell of {len(c)} characters: {c[:60]}…"
        for c in table_cells(text)
        if len(c) > MAX_CELL
    ]
    found += [f"a commit hash: {h}" for h in HASH.findall(text)]
    if not page.startswith(DEVELOPMENT):
        found += [f"a date: {d}" for d in DATE.findall(text)]
        found += [
            f"talk of the run behind a figure: '{m.group(0)}'"
            for p in RUN_TALK
            for m in p.finditer(text)
        ]
        found += [
            f"a source path (only the development pages name files): {path}"
            for path in SOURCE_PATH.findall(text)
            if not USER_FILES.match(path)
        ]
    return found


@pytest.mark.parametrize("page", pages(), ids=name)
def test_every_page_is_plain(page: Path) -> None:
    found = faults(page.read_text(), name(page))
    assert not found, f"docs/{name(page)}:\n" + "\n".join(found)


def test_the_whole_site_is_short() -> None:
    total = sum(len(p.read_text()) for p in pages())
    assert total <= MAX_SITE, f"the site's pages hold {total:,} characters (at most {MAX_SITE:,})"


def test_the_rules_catch_a_notebook_page() -> None:
    """A page written as a lab notebook fails on each count (the premise built into it)."""
    text = "\n".join(
        [
            "# A run",
            "Measured at dee9fd7 on a sixth machine, 2026-12-04 (rerun at a59b4ee).",
            "| row | figure |",
            "|---|---|",
            "| logistic alone (before) | " + "0.437 / " * 60 + "|",
            "The code: service/cli/concepts.py; the config: training/grasp/configs/symmetric.json",
            *(["line"] * MAX_LINES),
        ]
    )
    found = "\n".join(faults(text, "how-to/notebook.md"))
    for expected in ("lines", "table cell", "dee9fd7", "a59b4ee", "2026-12-04", "sixth machine"):
        assert expected in found, expected
    assert "(before)" in found and "rerun at" in found
    assert "service/cli/concepts.py" in found
    assert "symmetric.json" not in found  # a config a user passes is no source path
    development = "\n".join(faults(text, "development/notebook.md"))
    assert "dee9fd7" in development and "lines" in development  # hashes and size: everywhere
    assert "sixth machine" not in development and "concepts.py" not in development


def test_the_readme_is_a_door_with_the_commands_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert readme.count("\n") <= README_LINES, f"the README is over {README_LINES} lines"
    demo = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && .venv/bin/strata demo"
    assert demo in readme
    tests = next(
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.startswith("bash .ci/install-tools")
    )
    assert tests in readme.splitlines(), "the README's test command is not the one .ci/run runs"
    assert not HASH.findall(readme), HASH.findall(readme)


def contents() -> list[tuple[str, str, int, int]]:
    """The site's table of contents: (section, page, characters, lines), in the nav's order,
    then any page the nav leaves out."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    rows: list[tuple[str, str, int, int]] = []

    def walk(items: list, section: str) -> None:
        for item in items:
            title, target = next(iter(item.items())) if isinstance(item, dict) else ("", item)
            if isinstance(target, list):
                walk(target, title)
                continue
            path = DOCS / target
            text = path.read_text() if path.is_file() else ""
            rows.append((section, target, len(text), text.count("\n")))

    walk(nav, "")
    listed = {row[1] for row in rows}
    rows += [
        ("(not in the nav)", name(p), len(p.read_text()), p.read_text().count("\n"))
        for p in pages()
        if name(p) not in listed
    ]
    return rows


if __name__ == "__main__":
    rows = contents()
    for section, page, chars, lines in rows:
        print(f"{section:<16} {page:<36} {chars:>7,} {lines:>5}")
    print(f"{'total':<53} {sum(r[2] for r in rows):>7,} {sum(r[3] for r in rows):>5}")
