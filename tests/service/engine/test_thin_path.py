"""The thin request path keeps its answers: ids read without Arrow match the bundle's, a
rotation cut to a prefix is the full rotation's head, a vector's unit vector is computed once
by its check, interceptors rewrite a method's handler once, metric series resolved once count
as before, and a request leaves the batcher's queue by identity."""

from __future__ import annotations

import asyncio
from collections import deque

import grpc
import numpy as np
import pyarrow as pa
import pytest

from service.api.grpc.rpc_errors import ErrorStatusInterceptor
from service.engine.hits import IdColumn
from service.engine.search import SearchEngine
from service.limits import LIMITS
from service.query.checks import check_query
from service.results import SearchQuery
from service.serving.batch_order import Flow
from service.serving.metrics import ServerMetrics


def test_id_column_reads_the_ids_the_bundle_reads(engine: SearchEngine):
    rows = [0, engine.bundle.rows - 1, 3, 3, 1]
    assert engine.scorer.id_column.take(rows) == engine.bundle.ids(rows)
    assert len(engine.scorer.id_column) == engine.bundle.rows


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_id_column_of_several_chunks_and_a_slice(kind: pa.DataType):
    chunks = pa.chunked_array([pa.array(["a", "bé", ""], kind), pa.array(["row-3", "z"], kind)])
    assert IdColumn(chunks).take([4, 1, 2, 0, 3]) == ["z", "bé", "", "a", "row-3"]
    assert IdColumn(pa.array(["x", "y", "zz", "w"], kind).slice(1, 2)).take([1, 0]) == ["zz", "y"]


def test_a_rotation_cut_to_a_prefix_is_the_full_rotations_head(engine: SearchEngine):
    grasp = engine.bundle.grasp
    x = np.random.default_rng(0).normal(size=(3, grasp.dim)).astype(np.float32)
    full = grasp.apply(x)
    for length in engine.bundle.prefix_lengths:
        head = grasp.apply(x, length)
        assert head.shape == (3, length)
        np.testing.assert_allclose(head, full[:, :length], rtol=0, atol=1e-5)
    one = grasp.apply(x[:1])
    for length in engine.bundle.prefix_lengths:  # one query (a served Search): the same floats
        np.testing.assert_array_equal(grasp.apply(x[:1], length), one[:, :length])


def test_the_check_of_a_vector_query_returns_its_unit_vector(engine: SearchEngine):
    values = np.arange(1, engine.bundle.dim + 1, dtype=np.float64) * 1e20  # float32 would overflow
    query = SearchQuery.of(vector=values)
    unit = check_query(query, LIMITS, engine.metadata_fields, engine.bundle.dim, None)
    assert unit is not None and unit.dtype == np.float32
    np.testing.assert_array_equal(unit, (values / np.linalg.norm(values)).astype(np.float32))
    assert (
        check_query(SearchQuery.of("a dog"), LIMITS, [], engine.bundle.dim, engine.encoder) is None
    )
    # the engine searches with that vector: the same hits as through the bundle
    result = engine.search(SearchQuery.of(vector=values, granularity="full", plan="direct"))
    _, rows = engine.bundle.search(unit[None, :], "full", 10)
    assert [h.row for h in result.hits] == rows[0].tolist()


def test_an_interceptor_rewrites_a_methods_handler_once():
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    other = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    interceptor = ErrorStatusInterceptor({"strata.v1.SearchService"})
    method = "/strata.v1.SearchService/Search"

    class Details(grpc.HandlerCallDetails):
        def __init__(self, method: str) -> None:
            self.method, self.invocation_metadata = method, ()

    async def handler_for(given: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        async def continuation(details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
            return given

        return await interceptor.intercept_service(continuation, Details(method))

    first, again = asyncio.run(handler_for(handler)), asyncio.run(handler_for(handler))
    assert first is again and first is not handler
    assert asyncio.run(handler_for(other)) is not first  # another handler: rewritten anew


def test_series_resolved_once_count_as_labels_would():
    metrics = ServerMetrics()
    labels = ("unary", "strata.v1.SearchService", "Search")
    series = metrics.rpc_series(labels)
    assert metrics.rpc_series(labels) is series
    series.started.inc()
    series.handled("OK").inc()
    series.handled("OK").inc()
    series.handled("INTERNAL").inc()
    metrics.observe_search("object", 0.002)
    metrics.observe_search("object", 0.004)
    value = metrics.registry.get_sample_value
    rpc = dict(zip(("grpc_type", "grpc_service", "grpc_method"), labels, strict=True))
    assert value("grpc_server_started_total", rpc) == 1
    assert value("grpc_server_handled_total", {**rpc, "grpc_code": "OK"}) == 2
    assert value("grpc_server_handled_total", {**rpc, "grpc_code": "INTERNAL"}) == 1
    assert value("strata_search_seconds_count", {"granularity": "object"}) == 2


def test_requests_with_equal_fields_are_two_requests():
    first, second = Flow(), Flow()  # nothing waits in either: their fields are equal
    flows = deque([first, second])
    assert second in flows and first != second
    flows.remove(second)
    assert list(flows) == [first] and flows[0] is first
