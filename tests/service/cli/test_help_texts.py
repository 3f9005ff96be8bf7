"""`--help` texts describe the bundle as it is built today: one shared store of every row,
shortlist codes and concept postings, not the layout before the store."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from service.cli import app

STALE = ("one faiss index per prefix", "a faiss index per prefix", "flat: copied")


def help_text(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], prog_name="strata")
    assert result.exit_code == 0, result.output
    return " ".join(result.output.lower().split())


@pytest.mark.parametrize(
    "command",
    [("index",), ("index", "build"), ("index", "add"), ("index", "delete"), ("demo",)],
)
def test_help_describes_the_shared_store(command: tuple[str, ...]):
    text = help_text(*command)
    assert not [s for s in STALE if s in text], text


def test_index_build_help_names_store_codes_and_postings():
    text = help_text("index", "build")
    for words in ("shared store", "every granularity", "shortlist codes", "concept postings"):
        assert words in text, text
