"""The search engine over a real MiniLM bundle, without a network: granularity search, AUTO
routing, concept filters, explanations, batching of encoder calls, typed errors; each request
on both engines (local FAISS, Milvus: conftest.ENGINES)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from search_gallery import LANTERN, written_concepts
from two_engines import ENGINES, configured, either

from indexer.format.bundle import Bundle
from service.engine.explain import row_concepts
from service.engine.search import EngineConfig, SearchEngine
from service.errors import NotFoundError, QueryError
from service.results import SearchQuery
from training.core.granularity import Granularity


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest, engine: SearchEngine) -> SearchEngine:
    return either(request, engine, "milvus_text_engine")


def fields(engine: SearchEngine, rows: list[int], name: str) -> list[str]:
    return engine.bundle.metadata(np.asarray(rows)).column(name).to_pylist()


def search(engine: SearchEngine, text: str, **options) -> list[dict[str, str]]:
    query = SearchQuery.of(
        text, metadata_fields=["subject", "subject_attribute", "object"], **options
    )
    return [h.metadata for h in engine.search(query).hits]


def test_an_object_query_at_object_finds_the_object_whatever_its_attributes(engine):
    hits = search(engine, "a dog", granularity="object", k=10)
    with_dog = [h["subject"] == "dog" or h["object"] == "dog" for h in hits]
    assert sum(with_dog) >= 8, hits
    assert len({h["subject_attribute"] for h in hits if h["subject"] == "dog"}) >= 3


@pytest.mark.parametrize(("wanted", "other"), [("red", "blue"), ("blue", "red")])
def test_an_attribute_query_prefers_its_attribute(engine, wanted: str, other: str):
    def share(query: str, attribute: str) -> float:
        hits = search(engine, query, granularity="attribute", k=10)
        return sum(h["subject_attribute"] == attribute for h in hits) / len(hits)

    assert share(f"a {wanted} dog", wanted) >= 0.4
    assert share(f"a {wanted} dog", wanted) > share(f"a {other} dog", wanted)


def test_a_prepared_query_carries_its_prefix_length(engine):
    """The contract is read once, when a query is routed: its length rides on the prepared
    query (0 for one that failed its checks)."""
    for granularity in ("object", "auto", "caption", "full"):
        prepared = engine._prepare(SearchQuery.of("a red dog", granularity=granularity))
        assert prepared.error is None, prepared.error
        assert prepared.length == engine.contract[prepared.route.granularity]
    assert engine._prepare(SearchQuery.of("a dog", granularity="scene")).length == 0


def test_the_scorer_plans_searches_and_answers_at_the_prepared_length(engine):
    """Routed to object but carrying the full length, a query is searched and answered at the
    full prefix: no scorer looks the length up again from the route."""
    full = engine.contract[Granularity.FULL]
    prepared = engine._prepare(SearchQuery.of("a dog", granularity="object", plan="direct"))
    prepared.length = full
    engine._embed([prepared], None)
    engine.scorer.search([prepared], engine.bundle.rotate(prepared.embedding[None, :]))
    at_full = engine.search(SearchQuery.of("a dog", granularity="full", plan="direct"))
    assert prepared.result.prefix_length == full
    assert prepared.result.granularity == Granularity.OBJECT
    assert prepared.result.ids == at_full.ids


@pytest.mark.parametrize(
    ("text", "granularity"),
    [
        ("a dog", Granularity.OBJECT),
        ("a red dog", Granularity.ATTRIBUTE),
        ("dog chasing a ball", Granularity.RELATION),
        ("a brown dog chasing a red ball on the beach", Granularity.CAPTION),
    ],
)
def test_auto_routes_each_query_to_its_prefix(engine, text: str, granularity: Granularity):
    result = engine.search(SearchQuery.of(text))
    assert result.granularity == granularity
    assert result.prefix_length == engine.contract[granularity]
    assert result.routing_reason and result.routing_reason != "requested"
    explicit = engine.search(SearchQuery.of(text, granularity=granularity.value))
    assert explicit.ids == result.ids and explicit.routing_reason == "requested"


def test_vector_queries_go_full_under_auto_and_match_the_text(engine, minilm):
    vector = minilm.encode_text(["a dog chasing a ball"])[0]
    by_vector = engine.search(SearchQuery.of(vector=vector * 3.0, k=5))  # any scale
    by_text = engine.search(SearchQuery.of("a dog chasing a ball", granularity="full", k=5))
    assert by_vector.granularity == Granularity.FULL and by_vector.ids == by_text.ids
    np.testing.assert_allclose(
        [h.score for h in by_vector.hits], [h.score for h in by_text.hits], atol=1e-5
    )


def concept_sizes(engine: SearchEngine) -> dict[int, int]:
    return {c: len(engine.bundle.postings(c)[0]) for c in range(2 * engine.bundle.dim)}


def active_sets(engine: SearchEngine, rows: list[int]) -> list[set[int]]:
    ids, _ = row_concepts(engine.bundle, rows)
    return [{int(c) for c in r if c >= 0} for r in ids]


@pytest.mark.parametrize("exact_max", [0, 4096], ids=["selector", "exact"])
def test_required_and_excluded_concepts_filter_inside_the_search(engine, exact_max: int):
    engine = configured(engine, EngineConfig(exact_max=exact_max))
    sizes = concept_sizes(engine)
    required = max(sizes, key=lambda c: (sizes[c], -c))  # the busiest concept, whatever it is
    plain = engine.search(SearchQuery.of("a dog", k=10))
    filtered = engine.search(SearchQuery.of("a dog", k=10, require=[required]))
    assert len(filtered.hits) == min(10, sizes[required])
    assert filtered.filtered_rows == sizes[required] > 0
    assert all(required in s for s in active_sets(engine, [h.row for h in filtered.hits]))
    # excluding a concept the unfiltered hits have changes the result, and none keeps it
    common = Counter(c for s in active_sets(engine, [h.row for h in plain.hits]) for c in s)
    banned = common.most_common(1)[0][0]
    excluded = engine.search(SearchQuery.of("a dog", k=10, exclude=[banned]))
    assert len(excluded.hits) == 10 and excluded.ids != plain.ids
    assert all(banned not in s for s in active_sets(engine, [h.row for h in excluded.hits]))
    assert excluded.filtered_rows == engine.bundle.rows - sizes[banned]
    # a filtered result keeps the unfiltered order among the rows it allows
    kept = [i for i in plain.ids if i in set(filtered.ids)]
    assert filtered.ids[: len(kept)] == kept


def test_a_filter_allowing_fewer_rows_than_k_returns_them_all(engine):
    sizes = concept_sizes(engine)
    rare = min((c for c, n in sizes.items() if n), key=lambda c: (sizes[c], c))
    result = engine.search(SearchQuery.of("a dog", k=sizes[rare] + 5, require=[rare]))
    assert len(result.hits) == sizes[rare] == result.filtered_rows


def test_filters_by_name_and_label(engine):
    entry, _ = written_concepts(engine.coder.catalog)
    by_name = engine.search(SearchQuery.of("a cat", k=10, require=[LANTERN]))
    assert by_name.hits and by_name.filtered_rows == concept_sizes(engine)[entry.concept]
    assert all(entry.concept in s for s in active_sets(engine, [h.row for h in by_name.hits]))
    by_label = engine.search(SearchQuery.of("a cat", k=10, require=[entry.label]))
    assert by_label.ids == by_name.ids
    # the name most concepts share allows the rows of any of them
    shared = Counter(e.name for e in engine.coder.catalog if e.named).most_common(1)[0][0]
    same_name = {e.concept for e in engine.coder.catalog if e.name == shared}
    by_name = engine.search(SearchQuery.of("a cat", k=10, require=[shared]))
    assert by_name.filtered_rows == len(
        np.unique(np.concatenate([engine.bundle.postings(c)[0] for c in same_name]))
    )
    assert all(s & same_name for s in active_sets(engine, [h.row for h in by_name.hits]))


def test_explain_names_hit_concepts_and_shared_ones(engine):
    # a gallery caption as the query: its own row is a hit and shares its concepts, any model;
    # the bundle has no floor (every concept shown), and one name is shown once, its concepts'
    # contributions summed (service/engine/explain.py)
    caption = engine.bundle.metadata(np.array([0])).column("caption").to_pylist()[0]
    result = engine.search(SearchQuery.of(caption, k=5, explain=True))
    catalog = engine.coder.catalog
    code = engine.coder.encode(engine.encoder.encode_text([caption]))
    query = {int(c): float(a) for c, a in zip(code[0][0], code[1][0], strict=True)}
    assert sorted(c.name for c in result.query_concepts) == sorted({catalog[c].name for c in query})
    shared_any = False
    for hit, active in zip(
        result.hits, active_sets(engine, [h.row for h in result.hits]), strict=True
    ):
        assert 1 <= len(hit.concepts) <= 5 and {c.id for c in hit.concepts} <= active
        both = set(query) & active
        names = [s.name for s in hit.shared_concepts]
        assert len(names) == len(set(names)) and set(names) == {catalog[c].name for c in both}
        values = item_values(engine, hit.row)
        for s in hit.shared_concepts:
            assert s.id in both and s.name == catalog[s.id].name
            assert s.query_activation == pytest.approx(query[s.id])
            so_named = [c for c in both if catalog[c].name == s.name]
            total = sum(query[c] * values[c] for c in so_named)
            assert s.contribution == pytest.approx(total, rel=1e-5)
        contributions = [s.contribution for s in hit.shared_concepts]
        assert contributions == sorted(contributions, reverse=True)
        shared_any |= bool(hit.shared_concepts)
    assert shared_any


def item_values(engine: SearchEngine, row: int) -> dict[int, float]:
    """A row's active concepts and activations, read from the postings."""
    ids, values = row_concepts(engine.bundle, [row])
    return {int(c): float(v) for c, v in zip(ids[0], values[0], strict=True) if c >= 0}


def test_explain_gives_the_cosine_at_every_prefix(engine, minilm):
    hit = engine.search(SearchQuery.of("a dog", granularity="object", k=1)).hits[0]
    explanation = engine.explain(SearchQuery.of("a dog"), item_id=hit.id)
    assert explanation.row == hit.row
    assert [s.prefix_length for s in explanation.similarities] == [24, 48, 96, 192, 384]
    assert explanation.cosine(Granularity.OBJECT) == pytest.approx(hit.score, abs=1e-5)
    vector = minilm.encode_text(["a dog"])[0]  # the same query, embedded once
    for granularity in Granularity:
        query = SearchQuery.of(vector=vector, granularity=granularity.value, k=300)
        result = engine.search(query)
        score = next(h.score for h in result.hits if h.row == hit.row)
        assert explanation.cosine(granularity) == pytest.approx(score, abs=1e-5)
    assert explanation.item_concepts and explanation.query_concepts
    with pytest.raises(NotFoundError, match="no item 'nope'"):
        engine.explain(SearchQuery.of("a dog"), item_id="nope")
    with pytest.raises(NotFoundError, match="row 9999"):
        engine.explain(SearchQuery.of("a dog"), row=9999)


@pytest.mark.parametrize(
    ("item_id", "row", "error", "message"),
    [
        (None, None, QueryError, "name the item by its id or by its row, one of them"),
        ("scene-0000001", 0, QueryError, "by its id or by its row, one of them"),
        ("", None, QueryError, "empty item id"),
        ("x" * 257, None, QueryError, r"an item id of 257 characters .*; at most 256"),
        (None, -1, NotFoundError, r"row -1 outside \[0, "),
        (None, "past the end", NotFoundError, r"row \d+ outside \[0, \d+\) of "),
    ],
)
def test_both_scorers_check_the_item_asked_alike(engine, item_id, row, error, message: str):
    """The one id-or-row check (service/engine/scoring.py's check_item), in either scorer."""
    if row == "past the end":
        row = engine.bundle.rows
    with pytest.raises(error, match=message):
        engine.scorer.stored_row(item_id, row)
    last = engine.bundle.rows - 1
    assert engine.scorer.stored_row(None, last).row == last


class CountingEncoder:
    """Delegates to an encoder and counts its encode_text calls."""

    def __init__(self, encoder) -> None:
        self.encoder, self.text_calls = encoder, 0

    def __getattr__(self, name: str):
        return getattr(self.encoder, name)

    def encode_text(self, texts):
        self.text_calls += 1
        return self.encoder.encode_text(texts)


def test_a_batch_embeds_all_its_texts_in_one_call_and_bad_queries_fail_alone(text_bundle, minilm):
    counting = CountingEncoder(minilm)
    engine = SearchEngine(Bundle.open(text_bundle), counting)
    queries = [
        SearchQuery.of("a dog"),
        SearchQuery.of("   "),
        SearchQuery.of("a red cat", k=3),
        SearchQuery.of(vector=[1.0, 2.0]),
        SearchQuery.of("a horse", require=["unicorn-that-is-no-concept"]),
    ]
    results = engine.search_batch(queries)
    assert counting.text_calls == 1
    assert len(results[0].hits) == 10 and len(results[2].hits) == 3
    assert isinstance(results[1], QueryError) and "empty text" in str(results[1])
    assert isinstance(results[3], QueryError) and "384" in str(results[3])
    assert isinstance(results[4], QueryError) and "unknown concept" in str(results[4])


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (SearchQuery.of(), "the query is empty"),
        (SearchQuery.of(""), "empty text query"),
        (SearchQuery.of("a dog", k=0), r"top_k must lie in \[1, 1000\]"),
        (SearchQuery.of("a dog", k=1001), r"top_k must lie in \[1, 1000\]"),
        (SearchQuery.of(vector=[0.1] * 10), "the vector has 10 values"),
        (SearchQuery.of(vector=[float("nan")] * 384), "NaN"),
        (SearchQuery.of(vector=[0.0] * 384), "all zeros"),
        (
            SearchQuery.of("a dog", granularity="scene"),
            "unknown granularity 'scene'; choose from auto, object, ",
        ),
        (SearchQuery.of("a dog", exclude=["+9999"]), "unknown concept"),
        (SearchQuery.of("a dog", metadata_fields=["colour"]), "unknown metadata field"),
        (SearchQuery.of(image=b"\x89PNG"), "has no image tower"),
        (SearchQuery.of("a dog", image=b"x"), "not text and image"),
    ],
)
def test_bad_queries_raise_query_errors_naming_the_fault(engine, query, message: str):
    with pytest.raises(QueryError, match=message):
        engine.search(query)


def test_catalog_pages_and_look_ups(engine):
    first = engine.list_concepts(page_size=100)
    assert first.total_size == 2 * engine.bundle.dim and len(first.concepts) == 100
    seen, token = [c.id for c in first.concepts], first.next_page_token
    while token:
        page = engine.list_concepts(page_size=100, page_token=token)
        seen += [c.id for c in page.concepts]
        token = page.next_page_token
    assert seen == list(range(2 * engine.bundle.dim))
    entry, unnamed = written_concepts(engine.coder.catalog)
    named = engine.list_concepts(name_contains=LANTERN.upper())
    assert [c.id for c in named.concepts] == [entry.concept]
    by_name = engine.get_concept(LANTERN)
    assert [c.id for c in by_name] == [entry.concept] and by_name[0].name == LANTERN
    shared = Counter(e.name for e in engine.coder.catalog if e.named).most_common(1)[0][0]
    by_name = engine.get_concept(shared)
    assert {c.id for c in by_name} == {e.concept for e in engine.coder.catalog if e.name == shared}
    assert [c.score for c in by_name] == sorted((c.score for c in by_name), reverse=True)
    assert [c.score for c in by_name] == sorted((c.score for c in by_name), reverse=True)
    assert engine.get_concept("+0")[0].id == 0 and engine.get_concept(1)[0].label == "-0"
    info = engine.get_concept(0)[0]
    assert info.active_rows == len(engine.bundle.postings(0)[0]) and info.examples
    with pytest.raises(NotFoundError):
        engine.get_concept("unicorn-that-is-no-concept")
    assert engine.get_concept(unnamed.label)[0].id == unnamed.concept
    with pytest.raises(QueryError, match="page token"):
        engine.list_concepts(page_token="x")
