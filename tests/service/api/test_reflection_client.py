"""A generic client that knows nothing of our stubs calls Search through server reflection."""

from __future__ import annotations

from grpc_requests import Client

from service.api.background import BackgroundServer

SEARCH_SERVICE = "strata.v1.SearchService"


def test_a_reflection_client_lists_the_services_and_searches(server: BackgroundServer):
    client = Client.get_by_endpoint(server.target)
    assert SEARCH_SERVICE in client.service_names
    assert "grpc.health.v1.Health" in client.service_names
    methods = set(client.service(SEARCH_SERVICE).method_names)
    assert {"Search", "BatchSearch", "Explain", "GetIndexInfo"} <= methods

    response = client.request(
        SEARCH_SERVICE,
        "Search",
        {"query": {"text": "a red dog"}, "granularity": "GRANULARITY_ATTRIBUTE", "top_k": 3},
    )

    assert response["granularity"] == "GRANULARITY_ATTRIBUTE"
    assert len(response["hits"]) == 3
    scores = [hit["score"] for hit in response["hits"]]
    assert scores == sorted(scores, reverse=True)
    info = client.request(SEARCH_SERVICE, "GetIndexInfo", {})
    assert int(info["rows"]) == 300
