"""Benchmark figures as data: every figure the site shows comes from a committed result file in
the envelope benchmarks/harness.py writes, listed in benchmarks/catalog.toml and rendered by
docs/hooks/results.py (which `mkdocs build --strict` runs)."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from benchmarks.harness import RESULT_FORMAT, RESULTS, envelope, publish, read_figures

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def load_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("results_hook", DOCS / "hooks" / "results.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = load_hook()
CATALOG = hook.load_catalog()


def committed() -> list[Path]:
    return sorted(RESULTS.glob("*.json"))


def test_the_hook_reads_what_the_harness_writes() -> None:
    assert hook.RESULT_FORMAT == RESULT_FORMAT
    assert hook.RESULTS == RESULTS


def test_a_published_result_is_an_envelope_the_page_renders(tmp_path: Path) -> None:
    figures = {"recall_at_10": {"32": 0.9931, "512": 1.0}, "rows": 200000, "note": "spectrum"}
    path = tmp_path / "codes.json"
    returned = publish(figures, path, command="python -m benchmarks.indexer.store_codes")
    assert returned == figures
    data = json.loads(path.read_text())
    assert data["format"] == RESULT_FORMAT
    assert data["command"] == "python -m benchmarks.indexer.store_codes"
    assert data["machine"]["cores"] >= 1 and data["machine"]["cpu"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", data["date"])
    assert read_figures(path) == figures
    entry = {
        "section": "indexing",
        "title": "Codes",
        "what": "Recall of the codes.",
        "command": "python -m benchmarks.indexer.store_codes",
        "cost": "a minute",
        "columns": ["coding", "rows", "at 32", "at 512"],
        "rows": [
            ["int8", "rows", "recall_at_10/32", "recall_at_10/512"],
            ["float16", "rows", "", "recall_at_10/512"],  # an empty path: a blank cell
        ],
    }
    text = hook.section_entry("codes", entry, tmp_path)
    assert "### Codes {#codes}" in text
    assert "| int8 | 200,000 | 0.993 | 1.000 |" in text
    assert "| float16 | 200,000 | – | 1.000 |" in text
    assert "`python -m benchmarks.indexer.store_codes` · " in text
    assert data["date"][:10] in text


def test_a_benchmark_without_a_result_shows_the_command_that_makes_one(tmp_path: Path) -> None:
    entry = {**CATALOG["funnel"]}
    text = hook.section_entry("funnel", entry, tmp_path)
    assert "No current result" in text and entry["command"] in text and entry["cost"] in text
    figure = hook.figure("funnel", entry, "explanation/funnel.md", tmp_path)
    assert "../benchmarks.md#funnel" in figure and entry["command"] in figure


def test_a_figure_path_the_result_lacks_fails_the_build(tmp_path: Path) -> None:
    publish({"a": 1}, tmp_path / "x.json", command="python -m benchmarks.x")
    entry = {**CATALOG["funnel"], "rows": [["b", "b"]]}
    with pytest.raises(ValueError, match="no figure 'b'"):
        hook.section_entry("x", entry, tmp_path)


def test_a_bare_figures_file_reads_as_its_figures(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"cache_seconds": 1.5}))
    assert read_figures(path) == {"cache_seconds": 1.5}


@pytest.mark.parametrize("path", committed(), ids=lambda p: p.name)
def test_every_committed_result_is_listed_and_renders(path: Path) -> None:
    name = path.stem
    assert name in CATALOG, f"{path.name} is not in benchmarks/catalog.toml"
    data = json.loads(path.read_text())
    assert data["format"] == RESULT_FORMAT
    assert set(data) == {"format", "command", "machine", "date", "figures"}
    ran, listed = shlex.split(data["command"]), shlex.split(CATALOG[name]["command"])
    inner = listed[listed.index("--") + 1 :] if "--" in listed else listed
    assert ran[:3] == inner[:3], (
        f"{path.name} was written by {ran[:3]}, the catalog says {inner[:3]}"
    )
    text = hook.section_entry(name, CATALOG[name])
    assert "No current result" not in text


def test_every_section_and_figure_the_pages_name_is_in_the_catalog() -> None:
    sections = {entry["section"] for entry in CATALOG.values()}
    on_pages = {}
    for page in DOCS.rglob("*.md"):
        for kind, key in hook.PLACEHOLDER.findall(page.read_text()):
            on_pages.setdefault(kind, set()).add(key)
    assert on_pages["results"] == sections, "every section on docs/benchmarks.md, and only those"
    assert on_pages["result"] <= set(CATALOG)


def test_the_benchmarks_page_lists_every_benchmark() -> None:
    page = hook.expand((DOCS / "benchmarks.md").read_text(), "benchmarks.md")
    for name in CATALOG:
        assert f"{{#{name}}}" in page


@pytest.mark.slow
def test_record_writes_a_strata_eval_report_as_a_result(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    out = tmp_path / "result.json"
    write = f"import json; json.dump({{'ap': 0.286, 'big': [1, 2]}}, open({str(report)!r}, 'w'))"
    args = ["eval", str(report), "--keep", "ap", "--json", str(out)]
    subprocess.run(
        [sys.executable, "-m", "benchmarks.record", *args, "--", "python", "-c", write],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    data = json.loads(out.read_text())
    assert data["figures"] == {"ap": 0.286}
    assert data["command"] == shlex.join(["python", "-c", write])
    again = ["eval", str(report), "--json", str(out), "--", "python", "-c", "pass"]
    stale = subprocess.run(
        [sys.executable, "-m", "benchmarks.record", *again],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert stale.returncode != 0 and "did not write" in stale.stderr


def test_envelope_holds_the_figures_untouched() -> None:
    figures = {"nested": {"list": [1, 2.5, None]}}
    assert envelope(figures, "python -m benchmarks.x")["figures"] is figures
