"""The search page in a real browser: Debian's chromium driven by Playwright (never a browser
download), against a live server on the small MiniLM bundle; each test asserts what the DOM
shows against what the engine answers.

    STRATA_SCREENSHOTS=docs/assets/screenshots pytest tests/service/api/test_web_page.py

also saves a screenshot of each view there (the ones docs/how-to/search-page.md#the-page shows).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from http_helpers import call
from playwright import sync_api
from search_gallery import LANTERN

from service.api.background import BackgroundServer
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.results import ConceptRef, SearchQuery

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = os.environ.get("STRATA_SCREENSHOTS")
TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def site(engine: SearchEngine) -> Iterator[str]:
    with BackgroundServer(engine, ServerConfig(port=0, http_port=0)) as running:
        yield f"http://{running.server.http_address}"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if CHROMIUM is None:
        pytest.fail(
            "no chromium on PATH: the page's tests need Debian's chromium package "
            "(bash .ci/install-tools installs it)"
        )
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser, site: str) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    opened = context.new_page()
    opened.set_default_timeout(TIMEOUT_MS)
    opened.goto(site + "/")
    opened.wait_for_selector("body[data-ready=true]")
    yield opened
    context.close()


def shot(page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"))


def run_search(page, text: str, granularity: str = "AUTO", k: int = 8) -> None:
    page.fill("#query", text)
    page.select_option("#granularity", granularity)
    page.fill("#top-k", str(k))
    before = page.inner_text("#routing")
    page.click("#search-button")
    page.wait_for_function(
        "before => document.querySelector('#routing').innerText !== before", arg=before
    )


def cards(page) -> list[dict[str, str]]:
    return page.eval_on_selector_all(
        ".card",
        "nodes => nodes.map(n => ({id: n.dataset.id, row: n.dataset.row, "
        "score: n.querySelector('.score').innerText, caption: n.querySelector('.caption')"
        ".innerText}))",
    )


def test_search_at_two_granularities_and_auto(page, engine: SearchEngine):
    assert f"{engine.bundle.rows} rows" in page.inner_text("#bundle-info")
    for granularity, prefix in (("OBJECT", 24), ("FULL", 384)):
        run_search(page, "a dog", granularity)
        assert page.inner_text("[data-testid=routed]") == f"{granularity.lower()} (prefix {prefix})"
        expected = engine.search(SearchQuery.of("a dog", granularity=granularity.lower(), k=8))
        shown = cards(page)
        assert [c["id"] for c in shown] == expected.ids
        assert [c["score"] for c in shown] == [f"{h.score:.3f}" for h in expected.hits]
    run_search(page, "a red dog")  # AUTO: the routing reason is shown
    assert page.inner_text("[data-testid=routed]").startswith("attribute")
    reason = engine.search(SearchQuery.of("a red dog", k=8)).routing_reason
    assert page.inner_text("[data-testid=routing-reason]") == reason
    shot(page, "search")


def test_a_concept_filter_from_autocomplete(page, engine: SearchEngine):
    name = LANTERN  # a named concept active in some rows (tests/service/search_gallery.py)
    page.fill("#concept-input", name[:3])
    page.wait_for_function(
        "name => [...document.querySelectorAll('#concept-options option')]"
        ".some(o => o.value.startsWith(name + ' ('))",
        arg=name,
    )
    option = page.eval_on_selector_all(
        "#concept-options option",
        "(os, name) => os.map(o => o.value).find(v => v.startsWith(name + ' ('))",
        name,
    )
    label = re.search(r"\(([+-]\d+)\)$", option).group(1)
    page.fill("#concept-input", option)
    page.press("#concept-input", "Enter")
    assert page.get_attribute("#chips .chip", "data-ref") == label
    run_search(page, "a dog", "OBJECT")
    expected = engine.search(
        SearchQuery.of("a dog", granularity="object", k=8, require=(ConceptRef(label=label),))
    )
    assert page.inner_text("[data-testid=filtered-rows]") == (
        f" · filter allows {expected.filtered_rows} rows"
    )
    assert [c["id"] for c in cards(page)] == expected.ids
    shot(page, "concept-filter")
    page.click("#chips .chip")  # require ⇄ exclude
    assert page.get_attribute("#chips .chip", "data-mode") == "exclude"
    run_search(page, "a dog", "OBJECT")
    excluded = engine.search(
        SearchQuery.of("a dog", granularity="object", k=8, exclude=(ConceptRef(label=label),))
    )
    assert [c["id"] for c in cards(page)] == excluded.ids


def test_an_explanation_shows_each_prefix_and_the_shared_concepts(page, engine: SearchEngine):
    run_search(page, "a man riding a horse", "RELATION")
    first = cards(page)[0]
    page.click(".card >> nth=0 >> .explain")
    page.wait_for_selector("#explanation:not([hidden]) [data-testid=similarity]")
    why = engine.explain(
        SearchQuery.of("a man riding a horse"), row=int(first["row"]), near_captions=3
    )
    bars = page.eval_on_selector_all(
        "[data-testid=similarity]",
        "rows => rows.map(r => [r.querySelector('.bar-label').innerText, "
        "r.querySelector('.value').innerText])",
    )
    assert bars == [
        [f"{s.granularity.value} {s.prefix_length}", f"{s.cosine:.3f}"] for s in why.similarities
    ]
    shared = page.eval_on_selector_all(
        "[data-testid=shared-concept] .value", "values => values.map(v => v.innerText)"
    )
    assert shared == [f"{c.contribution:.3f}" for c in why.shared_concepts[:16]]
    assert page.inner_text("#explanation-title") == f"why {first['id']}"
    described = page.inner_text("#explanation-description")
    assert why.item_description is not None
    assert all(c.text in described for c in why.item_description.captions)
    if why.item_description.phrase:
        assert f"reads as: {why.item_description.phrase}" in described
    shot(page, "explanation")
    page.click("#close-explanation")
    assert page.is_hidden("#explanation")


def test_the_concept_browser(page, engine: SearchEngine):
    page.click("#tab-concepts")
    page.wait_for_selector(".concept-item")
    assert page.is_hidden("#view-search")
    name = LANTERN
    page.fill("#concept-search", name)
    page.wait_for_function(
        "name => [...document.querySelectorAll('.concept-item')].every(i => "
        "i.firstChild.innerText.toLowerCase().includes(name))",
        arg=name.lower(),
    )
    page.click(".concept-item >> nth=0")
    page.wait_for_selector("[data-testid=concept-name]")
    label = page.get_attribute(".concept-item >> nth=0", "data-label")
    concept = engine.get_concept(ConceptRef(label=label))[0]
    assert page.inner_text("[data-testid=concept-name]") == concept.name == LANTERN
    assert page.inner_text("[data-testid=concept-active-rows]") == str(concept.active_rows)
    examples = page.eval_on_selector_all("[data-testid=example]", "es => es.length")
    assert examples == len(concept.examples) > 0
    shot(page, "concepts")


def _png(path: Path, colour: tuple[int, int, int], size: tuple[int, int]) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)
    return path


def test_cards_show_thumbnails_from_the_image_root(browser, tmp_path: Path, tiny_clip):
    from search_gallery import build_image_bundle

    from indexer.format.bundle import Bundle

    engine = SearchEngine(Bundle.open(build_image_bundle(tmp_path, tiny_clip, _png)), tiny_clip)
    with BackgroundServer(engine, ServerConfig(port=0, http_port=0)) as running:
        context = browser.new_context(viewport={"width": 1280, "height": 860})
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(f"http://{running.server.http_address}/")
        page.wait_for_selector("body[data-ready=true]")
        assert page.is_visible("#image-label")  # an image tower: image queries offered
        run_search(page, "a red square", "FULL", k=6)
        page.wait_for_function(
            "[...document.querySelectorAll('.card .thumb')].every(i => i.complete && "
            "i.naturalWidth > 0) && document.querySelectorAll('.card .thumb').length === 6"
        )
        expected = engine.search(SearchQuery.of("a red square", granularity="full", k=6))
        assert [c["id"] for c in cards(page)] == expected.ids
        shot(page, "thumbnails")
        context.close()


def test_metadata_filters_and_group_by(page, site: str):
    _, info = call(site, "/v1/index-info")
    schema = {f["name"]: f["type"] for f in info.get("metadataSchema", [])}
    assert schema, "the text bundle's engine fills GetIndexInfo.metadata_schema"
    assert page.is_visible("#metadata-controls")
    assert {"subject", "place"} <= schema.keys()
    page.click("#add-condition")
    page.select_option("#conditions .condition .field", "place")
    page.fill("#conditions .condition .value", "in the park")
    page.select_option("#group-by", "subject")
    page.fill("#group-size", "2")
    run_search(page, "a dog", "CAPTION", k=4)
    shown = cards(page)
    assert shown and all("in the park" in c["caption"] for c in shown)
    groups = page.eval_on_selector_all(".card .group", "gs => gs.map(g => g.innerText)")
    assert len(groups) == len(shown)
    assert all(groups.count(g) <= 2 for g in groups) and len(set(groups)) <= 4
    shot(page, "metadata")


def test_the_search_lives_in_the_url(page, browser, site: str):
    """Query, granularity, k, concept chips, metadata conditions and grouping go into the URL:
    a reload, a shared link opened elsewhere and the back button give the same search."""
    _, found = call(site, f"/v1/concepts?nameContains={LANTERN}&pageSize=20")
    label = next(c["label"] for c in found["concepts"] if c["name"] == LANTERN)
    page.fill("#concept-input", f"{LANTERN} ({label})")
    page.press("#concept-input", "Enter")
    page.click("#chips .chip")  # require ⇄ exclude
    page.click("#add-condition")
    page.select_option("#conditions .condition .field", "place")
    page.fill("#conditions .condition .value", "in the park")
    page.select_option("#group-by", "subject")
    page.fill("#group-size", "2")
    run_search(page, "a dog", "CAPTION", k=4)
    first = cards(page)
    assert first
    params = parse_qs(urlparse(page.url).query)
    assert params["q"] == ["a dog"] and params["g"] == ["CAPTION"] and params["k"] == ["4"]
    assert params["exclude"] == [f"{LANTERN} ({label})"]
    assert params["group"] == ["subject"] and params["per"] == ["2"]
    assert json.loads(params["where"][0]) == [
        {"field": "place", "op": "equals", "value": "in the park", "max": ""}
    ]

    def same_search(opened) -> None:
        assert cards(opened) == first
        assert opened.input_value("#query") == "a dog"
        assert opened.input_value("#granularity") == "CAPTION"
        assert opened.input_value("#top-k") == "4"
        assert opened.get_attribute("#chips .chip", "data-mode") == "exclude"
        assert opened.input_value("#conditions .condition .value") == "in the park"
        assert opened.input_value("#group-by") == "subject"

    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    same_search(page)
    shared = browser.new_context(viewport={"width": 1280, "height": 860})
    elsewhere = shared.new_page()
    elsewhere.set_default_timeout(TIMEOUT_MS)
    elsewhere.goto(page.url)
    elsewhere.wait_for_selector("body[data-ready=true]")
    same_search(elsewhere)
    shared.close()
    run_search(page, "a red ball", "OBJECT", k=3)
    assert parse_qs(urlparse(page.url).query)["q"] == ["a red ball"]
    page.go_back()
    page.wait_for_function("() => document.querySelector('#query').value === 'a dog'")
    page.wait_for_function("n => document.querySelectorAll('.card').length === n", arg=len(first))
    same_search(page)
