"""An engine over a bundle with a shared vector store (indexer/format/store/) serves as one over
the layout before it: the same hits at every granularity (to float16 rounding), filtered and
explained queries, and a hot swap from one layout to the other."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.format.bundle import Bundle
from service.engine.search import SearchEngine
from service.results import SearchQuery
from training.core.granularity import Granularity

TEXTS = ("a red cube left of a blue sphere", "two green cylinders", "a small yellow cone")


def rebuilt(text_bundle: Path, minilm, folder: Path, store: str) -> SearchEngine:
    """The session's text bundle's rows, built again with the given store."""
    root = text_bundle.parent
    config = BuildConfig(
        cache=root / "cache",
        grasp=root / "grasp",
        cedar=root / "cedar",
        out=folder / "bundles",
        progress=False,
        store=store,
    )
    build_bundle(config)
    return SearchEngine(Bundle.open(folder / "bundles"), minilm)


@pytest.fixture(scope="module")
def store_engine(text_bundle: Path, minilm, tmp_path_factory) -> SearchEngine:
    return rebuilt(text_bundle, minilm, tmp_path_factory.mktemp("store"), "float16")


@pytest.fixture(scope="module")
def engine(text_bundle: Path, minilm, tmp_path_factory) -> SearchEngine:
    """The layout before the store: a float32 file per prefix."""
    return rebuilt(text_bundle, minilm, tmp_path_factory.mktemp("per-prefix"), "none")


def ids(result) -> list[str]:
    return [hit.id for hit in result.hits]


def test_every_granularity_finds_what_the_old_layout_finds(engine, store_engine):
    assert store_engine.bundle.store is not None and engine.bundle.store is None
    for granularity in Granularity:
        for text in TEXTS:
            query = SearchQuery.of(text, k=10, granularity=granularity.value)
            old, new = engine.search(query), store_engine.search(query)
            assert len(set(ids(old)) & set(ids(new))) >= 9, (granularity, text)
            assert new.prefix_length == old.prefix_length


def test_filtered_and_explained_queries_are_served_from_the_store(engine, store_engine):
    concept = "+0"
    query = SearchQuery.of(TEXTS[0], k=5, require=[concept], explain=True, granularity="full")
    old, new = engine.search(query), store_engine.search(query)
    assert new.filtered_rows == old.filtered_rows
    assert set(ids(new)) == set(ids(old))
    assert new.query_concepts
    item = store_engine.explain(SearchQuery.of(TEXTS[0]), row=3)
    assert [s.prefix_length for s in item.similarities] == sorted(store_engine.contract.values())


def test_a_hot_swap_between_the_layouts_serves_the_new_version(engine, store_engine):
    swapped = engine.with_bundle(store_engine.bundle)
    result = swapped.search(SearchQuery.of(TEXTS[1], k=5))
    assert result.bundle_version == store_engine.bundle.version
    assert ids(result) == ids(store_engine.search(SearchQuery.of(TEXTS[1], k=5)))
