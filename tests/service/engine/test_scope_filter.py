"""The concept filter's scope: a name covering a local and a global concept, narrowed by scope.

The bundle is the session's text bundle rebuilt with a catalog in which two concepts share the
name "thing", one scored local and one global (as `strata eval cds --artifact` writes scopes).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import faiss
import grpc
import numpy as np
import pytest
from search_gallery import LANTERN

from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.format.bundle import Bundle
from service._generated.strata.v1 import search_pb2 as pb
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.errors import QueryError
from service.limits import LIMITS
from service.results import SearchQuery
from training.core.artifacts import TransformArtifact

ALL = 1000  # more than the gallery's rows: every allowed row comes back


@pytest.fixture(scope="module")
def scoped(text_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int]:
    """(bundles, the local concept, the global concept): two busy concepts renamed "thing"."""
    root = text_bundle.parent
    bundle = Bundle.open(text_bundle)
    busy = sorted(range(2 * bundle.dim), key=lambda c: -len(bundle.postings(c)[0]))
    # the busiest concept is global, the next busiest with other rows local: the global one
    # then has rows the local one lacks, for any model (8 concepts are active in every row)
    glob = busy[0]
    glob_rows = set(bundle.postings(glob)[0].tolist())
    local = next(c for c in busy[1:] if set(bundle.postings(c)[0].tolist()) != glob_rows)
    cedar = TransformArtifact.load(root / "cedar")
    catalog = [dict(entry) for entry in cedar.extra["catalog"]]
    for entry in catalog:
        entry["scope"] = "global" if entry["concept"] % 2 else "local"  # every concept scored
    catalog[local].update(name="thing", scope="local", named=True)
    catalog[glob].update(name="thing", scope="global", named=True)
    out = tmp_path_factory.mktemp("scoped")
    dataclasses.replace(cedar, extra={**cedar.extra, "catalog": catalog}).save(out / "cedar")
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        build_bundle(
            BuildConfig(
                cache=root / "cache",
                grasp=root / "grasp",
                cedar=out / "cedar",
                out=out / "bundles",
                progress=False,
            )
        )
    finally:
        faiss.omp_set_num_threads(before)
    return out / "bundles", local, glob


@pytest.fixture(scope="module")
def scoped_engine(scoped, minilm) -> SearchEngine:
    return SearchEngine(Bundle.open(scoped[0]), minilm)


def hit_rows(engine: SearchEngine, **filters) -> set[int]:
    query = SearchQuery.of("a dog on the grass", granularity="full", k=ALL, **filters)
    return {hit.row for hit in engine.search(query).hits}


def test_scope_narrows_a_name_to_its_concepts_of_that_scope(scoped, scoped_engine):
    _, local, glob = scoped
    bundle = scoped_engine.bundle
    rows_local = set(bundle.postings(local)[0].tolist())
    rows_global = set(bundle.postings(glob)[0].tolist())
    assert rows_global - rows_local  # the two scopes allow different rows
    assert hit_rows(scoped_engine, require=["thing"]) == rows_local | rows_global
    assert hit_rows(scoped_engine, require=["thing"], scope="local") == rows_local
    assert hit_rows(scoped_engine, require=["thing"], scope="global") == rows_global
    everything = set(range(bundle.rows))
    assert hit_rows(scoped_engine, exclude=["thing"], scope="local") == everything - rows_local
    assert hit_rows(scoped_engine, exclude=["thing"]) == everything - rows_local - rows_global


def test_a_reference_with_no_concept_of_the_scope_is_refused(scoped, scoped_engine):
    _, local, _ = scoped
    label = scoped_engine.coder.catalog[local].label
    with pytest.raises(QueryError, match=re.escape(f"has no global concept ({label} local)")):
        hit_rows(scoped_engine, require=[label], scope="global")
    with pytest.raises(QueryError, match="unknown concept scope 'regional'"):
        hit_rows(scoped_engine, require=["thing"], scope="regional")


def test_a_catalog_without_scopes_says_so(engine: SearchEngine):
    name = LANTERN  # a named concept of the session's catalog
    with pytest.raises(QueryError, match="catalog has none"):
        hit_rows(engine, require=[name], scope="local")
    assert hit_rows(engine, require=[name])  # scope "any" needs no scores


def test_explain_and_grpc_carry_the_scope(scoped_engine):
    result = scoped_engine.search(
        SearchQuery.of("a dog on the grass", granularity="full", k=5, explain=True)
    )
    for hit in result.hits:
        for concept in hit.concepts:
            assert concept.scope == scoped_engine.coder.catalog[concept.id].scope
        for shared in hit.shared_concepts:
            assert shared.scope == scoped_engine.coder.catalog[shared.id].scope
    assert any(c.scope for hit in result.hits for c in hit.concepts)
    with (
        BackgroundServer(scoped_engine, ServerConfig(port=0)) as server,
        StrataClient(server.target, timeout=60) as client,
    ):
        served = client.search(
            "a dog on the grass", granularity="full", k=ALL, require=["thing"], scope="local"
        )
        assert {h.row for h in served.hits} == hit_rows(
            scoped_engine, require=["thing"], scope="local"
        )
        explained = client.search(  # explain covers at most 100 hits (service/limits.py)
            "a dog on the grass",
            granularity="full",
            k=LIMITS.explain_hits,
            require=["thing"],
            scope="local",
            explain=True,
        )
        rows = [h.row for h in served.hits]
        assert [h.row for h in explained.hits] == rows[: len(explained.hits)]
        assert all(c.scope in ("local", "global") for h in explained.hits for c in h.concepts)
        request = pb.SearchRequest(
            query=pb.Query(text="a dog"),
            filter=pb.ConceptFilter(require=[pb.ConceptRef(name="thing")], scope=7),
        )
        with pytest.raises(grpc.RpcError) as failure:
            client.stub.Search(request, timeout=30)
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "unknown concept scope" in failure.value.details()
    assert np.isfinite([h.score for h in served.hits]).all()
