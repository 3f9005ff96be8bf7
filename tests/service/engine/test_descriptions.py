"""Explain's descriptions of sparse codes: the phrase and the nearest gallery captions, in the
engine and over gRPC, on the service's MiniLM text bundle."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pyarrow as pa
import pytest
from search_gallery import BEACON, captioned_row, described_word

from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.format.bundle import Bundle
from service._generated.strata.v1 import search_pb2 as pb
from service._generated.strata.v1 import search_pb2_grpc
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient
from service.engine.descriptions import CAPTION_POOL, code_names, saying
from service.engine.explain import row_concepts
from service.engine.search import SearchEngine
from service.errors import QueryError
from service.results import SearchQuery
from training.cedar.concepts import ConceptCoder
from training.cedar.descriptions import code_reconstruction, compose_phrase
from training.core.cache import CacheManifest, EmbeddingCache, write_manifest, write_shard
from training.core.metrics import prefix_vectors, unit_rows


def test_the_item_description_is_its_codes_phrase_and_the_nearest_rows_saying_it(
    engine: SearchEngine,
):
    row = captioned_row(engine)
    explanation = engine.explain(SearchQuery.of("a red dog"), row=row, near_captions=5)
    bundle, coder = engine.bundle, engine.coder
    ids, values = (a[0] for a in row_concepts(bundle, [row]))
    item = explanation.item_description
    assert item is not None and described_word(coder.catalog) in item.phrase.split()
    assert item.phrase == compose_phrase(code_names(coder, ids, values))
    # the nearest rows to x̂ (its axes) by brute force over the gallery, the row itself left
    # out, among CAPTION_POOL × 5, kept where the caption says every word of the phrase
    axes = ids < coder.axis_concepts
    x_hat = unit_rows(
        code_reconstruction(
            coder.artifact.rotation,
            coder.artifact.mean,
            np.where(axes, ids, -1),
            np.where(axes, values, 0.0),
        )
    )
    gallery = bundle.index(bundle.dim).reconstruct_n(0, bundle.rows)  # as the bundle stores it
    cosines = gallery @ prefix_vectors(bundle.rotate(x_hat), bundle.dim)[0]
    cosines[row] = -np.inf
    pool = np.argsort(-cosines, kind="stable")[: CAPTION_POOL * 5]
    texts = bundle.metadata(pool).column("caption").to_pylist()
    expected = [int(r) for r, t in zip(pool, texts, strict=True) if saying(item.phrase, t)][:5]
    assert expected, "no row near the code says its phrase"
    assert [c.row for c in item.captions] == expected
    assert [c.cosine for c in item.captions] == pytest.approx(cosines[expected], abs=1e-5)
    assert all(saying(item.phrase, c.text) for c in item.captions)
    assert [c.id for c in item.captions] == bundle.ids(expected)
    # asking for no captions runs no search
    plain = engine.explain(SearchQuery.of("a red dog"), row=row)
    assert plain.item_description.phrase == item.phrase and not plain.item_description.captions


def test_a_code_showing_nothing_described_has_no_phrase_and_no_captions(engine: SearchEngine):
    """No phrase rather than a wrong one: a row whose shown concepts all fall below DESCRIBED."""
    ids, values = row_concepts(engine.bundle, range(engine.bundle.rows))
    bare = next(
        r for r in range(engine.bundle.rows) if not code_names(engine.coder, ids[r], values[r])
    )
    item = engine.explain(SearchQuery.of("a red dog"), row=bare, near_captions=5).item_description
    assert item.phrase == "" and item.captions == []


def gallery_rows(text_bundle: Path) -> np.ndarray:
    """The text bundle's raw embeddings, read from the cache it was built from (beside it)."""
    return np.asarray(EmbeddingCache.open(text_bundle.parent / "cache").embeddings("text"))


def test_a_querys_description_is_its_codes_and_its_captions_say_it(
    engine: SearchEngine, text_bundle: Path
):
    """A vector query equal to a described row's embedding is coded as that row was: its phrase
    says the described word and its near captions say the phrase, nearest first."""
    row = captioned_row(engine)
    vector = gallery_rows(text_bundle)[row]
    explanation = engine.explain(SearchQuery.of(vector=vector), row=0, near_captions=5)
    described = explanation.query_description
    assert described_word(engine.coder.catalog) in described.phrase.split()
    assert described.captions and all(saying(described.phrase, c.text) for c in described.captions)
    cosines = [c.cosine for c in described.captions]
    assert cosines == sorted(cosines, reverse=True)


def test_near_captions_outside_its_range_is_refused(engine: SearchEngine):
    for count in (-1, 21):
        with pytest.raises(QueryError, match=r"near_captions must lie in \[0, 20\]"):
            engine.explain(SearchQuery.of("a dog"), row=0, near_captions=count)


def test_explain_rpc_returns_both_descriptions(client: StrataClient, engine: SearchEngine):
    row = captioned_row(engine)
    query = engine.bundle.metadata([row]).column("caption").to_pylist()[0]
    remote = client.explain(query, row=row, near_captions=4)
    local = engine.explain(SearchQuery.of(query), row=row, near_captions=4)
    for side in ("query_description", "item_description"):
        got, want = getattr(remote, side), getattr(local, side)
        assert got.phrase == want.phrase
        assert [(c.id, c.row, c.text) for c in got.captions] == [
            (c.id, c.row, c.text) for c in want.captions
        ]
        assert [c.cosine for c in got.captions] == pytest.approx([c.cosine for c in want.captions])
    assert remote.item_description.captions
    assert row not in [c.row for c in remote.item_description.captions]
    assert client.explain(query, row=row).item_description.captions == []


@pytest.fixture(scope="module")
def stub(server: BackgroundServer) -> Iterator[search_pb2_grpc.SearchServiceStub]:
    with grpc.insecure_channel(server.target) as channel:
        yield search_pb2_grpc.SearchServiceStub(channel)


@pytest.mark.parametrize("count", [-3, 21, 1000])
def test_explain_rpc_refuses_near_captions_out_of_range(stub, count: int):
    request = pb.ExplainRequest(query=pb.Query(text="a dog"), row=0, near_captions=count)
    with pytest.raises(grpc.RpcError) as caught:
        stub.Explain(request, timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"near_captions must lie in [0, 20] (0: none), got {count}" in caught.value.details()


def test_a_bundle_without_captions_describes_by_phrase_only(
    text_bundle: Path, engine: SearchEngine, minilm, tmp_path: Path
):
    """The same rows and artifacts, the cache's metadata holding ids only."""
    source = EmbeddingCache.open(text_bundle.parent / "cache")
    x = np.asarray(source.embeddings("text"), dtype=np.float32)
    manifest = CacheManifest(
        encoder=source.manifest.encoder, dim=x.shape[1], dtype="float32", modalities=["text"]
    )
    ids = pa.table({"id": source.metadata().column("id")})
    manifest.shards.append(write_shard(tmp_path / "cache", 0, {"text": x}, ids, "float32"))
    manifest.complete = True
    write_manifest(tmp_path / "cache", manifest)
    artifacts = text_bundle.parent
    build_bundle(
        BuildConfig(
            cache=tmp_path / "cache",
            grasp=artifacts / "grasp",
            cedar=artifacts / "cedar",
            out=tmp_path / "bundles",
            progress=False,
        )
    )
    bare = SearchEngine(Bundle.open(tmp_path / "bundles"), minilm)
    row = captioned_row(engine)
    explanation = bare.explain(SearchQuery.of("a red dog"), row=row, near_captions=5)
    with_captions = engine.explain(SearchQuery.of("a red dog"), row=row, near_captions=5)
    assert explanation.item_description.phrase == with_captions.item_description.phrase != ""
    assert explanation.item_description.captions == []
    assert explanation.query_description.captions == []


def test_a_zero_shot_word_shown_for_a_precise_axis_of_its_name_keeps_the_name(
    word_bundle: Path,
):
    """The premise built here: the readout's word BEACON made zero-shot (no held-out
    precision), an unnamed axis named BEACON and held to 0.95, every concept agreeing on the
    gallery. Shown together they are one entry under the word, and the phrase says the name on
    the axis's precision; the word alone is no description, the axis alone is."""
    artifact = copy.deepcopy(Bundle.open(word_bundle).coder.artifact)
    words = artifact.extra["readout"]["words"]
    w = next(i for i, r in enumerate(words) if r["word"] == BEACON)
    words[w] = {**words[w], "zero_shot": True, "precision": None}
    catalog = artifact.extra["catalog"]
    axis = next(c for c, e in enumerate(catalog) if not e["named"])
    catalog[axis] = {**catalog[axis], "name": BEACON, "named": True, "precision": 0.95}
    coder = ConceptCoder(artifact)
    coder = coder.on_gallery(np.ones(coder.concepts, np.float32))
    word = coder.axis_concepts + w
    assert coder.catalog[word].zero_shot and coder.holds(word) and coder.holds(axis)
    both = np.array([axis, word, -1]), np.array([0.4, 0.5, 0.0], np.float32)
    assert [c for c, _ in coder.shown(*both)] == [word]  # one entry, under the word
    assert code_names(coder, *both) == [BEACON]
    assert code_names(coder, *both, said=lambda name: False) == []
    assert code_names(coder, np.array([word]), np.array([0.5], np.float32)) == []
    assert code_names(coder, np.array([axis]), np.array([0.4], np.float32)) == [BEACON]
