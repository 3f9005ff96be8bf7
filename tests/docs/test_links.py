"""The documentation stays in step with the code: every citation of a docs page resolves.

The code cites the documentation as `docs/PAGE.md#anchor`; each such citation must name a page
of docs/ and a heading anchor on it, with the ids MkDocs gives headings (its toc extension,
under mkdocs.yml's Markdown extensions). No code cites README sections: the README is a landing
page, and the documentation lives in docs/. The README's own links resolve the same way, and
every repository path the docs name (`deploy/…`, `training/…/configs/…`) exists, so that a moved
file shows up here. No file but the data folder's setting names the folder beside the checkout
(MAY_NAME_SHARED lists the few that may, and why).
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import markdown
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CODE_FOLDERS = ("service", "indexer", "training", "benchmarks", "tests", "deploy", "proto")
CODE_FILES = ("pyproject.toml",)
CODE_SUFFIXES = {".py", ".proto", ".yaml", ".yml", ".toml", ".json", ".cfg", ".txt", ""}
SKIPPED = ("service/_generated/", "tests/docs/")  # this file names the patterns
USER_MADE = {"deploy/k8s/secrets/admin-token"}  # git-ignored: the docs tell the user to make it

CITATION = re.compile(r"(?<![\w./-])docs/([\w./-]+\.md)(?:#([\w-]+))?")
README_CITATION = re.compile(r"README(?!\.md)")
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")
ELEMENT_ID = re.compile(r"<[a-z][^>]*\sid=\"([\w-]+)\"")
REPOSITORY_PATH = re.compile(
    r"(?<![\w./-])((?:service|indexer|training|benchmarks|tests|deploy|proto)/[\w./{}-]*[\w/])"
)


def code_files() -> list[Path]:
    found = [ROOT / name for name in CODE_FILES]
    for folder in CODE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            relative = path.relative_to(ROOT).as_posix()
            if (
                path.is_file()
                and path.suffix in CODE_SUFFIXES
                and "__pycache__" not in path.parts
                and not relative.startswith(SKIPPED)
            ):
                found.append(path)
    return found


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts)


@cache
def markdown_converter() -> markdown.Markdown:
    """A converter with the site's own Markdown extensions (mkdocs.yml), toc among them."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    names, settings = [], {}
    for entry in config["markdown_extensions"]:
        name, options = next(iter(entry.items())) if isinstance(entry, dict) else (entry, {})
        names.append(name)
        settings[name] = options or {}
    return markdown.Markdown(extensions=names, extension_configs=settings)


@cache
def anchors(page: Path) -> frozenset[str]:
    """The ids a link may name on a page, as MkDocs writes them: its headings', and those of
    elements the page gives one (`<a id="soak"></a>` on a row of a table of figures)."""
    converter = markdown_converter()
    converter.reset()
    html = converter.convert(page.read_text())

    def ids(tokens: list[dict]) -> list[str]:
        return [i for t in tokens for i in (t["id"], *ids(t["children"]))]

    return frozenset(ids(converter.toc_tokens)) | frozenset(ELEMENT_ID.findall(html))


def citations() -> list[tuple[str, str, str | None]]:
    """(where, page, anchor) of every docs citation in the code."""
    found = []
    for path in code_files():
        text = path.read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for match in CITATION.finditer(line):
                where = f"{path.relative_to(ROOT)}:{number}"
                found.append((where, match.group(1), match.group(2)))
    return found


def unresolved(page: Path, anchor: str | None) -> str | None:
    """Why `page#anchor` does not resolve, or None."""
    if not page.is_file():
        return f"no page {page.relative_to(ROOT)}"
    if anchor is not None and anchor not in anchors(page):
        return f"no heading or element #{anchor} on {page.relative_to(ROOT)}"
    return None


def test_the_code_cites_the_docs() -> None:
    assert len(citations()) >= 8  # limits, funnel, demo, seeding, the gallery recipe, deploy/


def test_every_docs_citation_in_the_code_resolves() -> None:
    faults = [
        f"{where}: {why}"
        for where, page, anchor in citations()
        if (why := unresolved(DOCS / page, anchor)) is not None
    ]
    assert not faults, "\n".join(faults)


def test_no_code_cites_readme_sections() -> None:
    faults = []
    for path in code_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if README_CITATION.search(line):
                faults.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not faults, "cite docs/PAGE.md#anchor instead:\n" + "\n".join(faults)


def test_the_readme_links_resolve() -> None:
    readme = ROOT / "README.md"
    faults = []
    for target in MARKDOWN_LINK.findall(readme.read_text()):
        if re.match(r"[a-z]+:", target):  # a URL
            continue
        path, _, anchor = target.partition("#")
        resolved = (ROOT / path) if path else readme
        if path.endswith(".md"):
            why = unresolved(resolved, anchor or None)
        else:
            why = None if resolved.exists() else f"no file {path}"
        if why is not None:
            faults.append(f"README.md: ({target}): {why}")
    assert not faults, "\n".join(faults)


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_repository_path_the_docs_name_exists(page: Path) -> None:
    text = MARKDOWN_LINK.sub("]", page.read_text())  # a link's target is a page, not a path
    missing = []
    for name in sorted(set(REPOSITORY_PATH.findall(text))):
        if "{" in name or name in USER_MADE:  # a pattern (prefix_{L}.faiss), a file to make
            continue
        if not (ROOT / name).exists():
            missing.append(name)
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_a_missing_anchor_is_found() -> None:
    page = DOCS / "reference" / "limits.md"
    assert unresolved(page, "limits") is None
    assert unresolved(page, "no-such-heading") is not None
    assert unresolved(DOCS / "no-such-page.md", None) is not None


# The files that may name the folder beside the checkout (`../shared`), and why. The repository
# stands on its own: that folder is only the data folder's optional fallback location, so only
# the setting, its documentation and its tests name it (and this test, which names the pattern).
SHARED = "../shared"
MAY_NAME_SHARED = {
    "training/core/settings.py": "the data-folder setting: data/, else ../shared/data",
    "docs/reference/settings.md": "that setting's documentation (the data folder)",
    "tests/training/core/test_settings.py": "that setting's tests: the fallback, and its order",
    "tests/docs/test_links.py": "this test: the pattern, and this list",
}


def repository_files() -> list[str]:
    """Every file of the checkout: tracked, and new ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    return sorted({name.decode() for name in listed.stdout.split(b"\0") if name})


def test_only_the_data_folder_setting_names_the_folder_beside_the_checkout() -> None:
    files = repository_files()
    assert "training/core/settings.py" in files and len(files) > 100
    naming = [
        name
        for name in files
        if (ROOT / name).is_file() and SHARED.encode() in (ROOT / name).read_bytes()
    ]
    unexpected = sorted(set(naming) - set(MAY_NAME_SHARED))
    assert not unexpected, (
        f"these files name {SHARED}, which a clone does not have: {unexpected}; name a path "
        "inside the repository, or the data folder's setting (docs/reference/settings.md)"
    )
    assert set(MAY_NAME_SHARED) <= set(naming), "an allowed file no longer needs its place"
