"""A small blocking Python client of strata.v1.SearchService, returning plain dataclasses.

    from service.api.grpc.client import StrataClient

    with StrataClient("127.0.0.1:50051") as client:
        result = client.search("a red dog", k=5, require=["dog"], explain=True)
        for hit in result.hits:
            print(hit.id, hit.score, [c.name for c in hit.shared_concepts])

Results are the dataclasses of service/results.py (the engine's own), so code moves between
an in-process `SearchEngine` and a remote server unchanged. A failed call raises
`StrataClientError` with the gRPC status code and the server's message.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Unpack

import grpc

from service._generated.strata.v1 import search_pb2 as pb
from service._generated.strata.v1 import search_pb2_grpc
from service.api.grpc import requests, responses
from service.errors import ServiceError
from service.results import (
    ConceptInfo,
    ConceptPage,
    ConceptRef,
    Explanation,
    IndexInfo,
    MetadataCondition,
    QueryOptions,
    SearchQuery,
    SearchResult,
)
from service.where import parse_where


class StrataClientError(ServiceError):
    """A call the server refused or could not answer: `code` is its gRPC status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.details = message


class StrataClient:
    """Blocking calls over one channel; `timeout` seconds per call. `root_certificates` (PEM
    bytes, or a file holding them) makes the channel TLS, trusting those roots; `b""` trusts
    the system's roots."""

    def __init__(
        self,
        target: str,
        timeout: float = 30.0,
        root_certificates: bytes | str | Path | None = None,
    ) -> None:
        self.target = target
        self.timeout = timeout
        options = [
            ("grpc.max_receive_message_length", requests.MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", requests.MAX_MESSAGE_BYTES),
            # a connection of its own (not one shared by every channel to the target in this
            # process): clients spread over the workers of `strata serve --workers N`
            ("grpc.use_local_subchannel_pool", 1),
        ]
        if root_certificates is None:
            self.channel = grpc.insecure_channel(target, options=options)
        else:
            roots = _pem(root_certificates)
            credentials = grpc.ssl_channel_credentials(root_certificates=roots or None)
            self.channel = grpc.secure_channel(target, credentials, options=options)
        self.stub = search_pb2_grpc.SearchServiceStub(self.channel)
        self._schema: dict[str, str] | None = None  # the server's metadata schema, once asked

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> StrataClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, request: object) -> Any:
        try:
            return getattr(self.stub, method)(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
            details = exc.details() if hasattr(exc, "details") else str(exc)
            if code == grpc.StatusCode.UNAVAILABLE:
                details = f"no Strata server answers at {self.target} ({details})"
            raise StrataClientError(code, details) from None

    def search(
        self,
        text: str | None = None,
        *,
        image: bytes | str | Path | None = None,
        vector: Sequence[float] | None = None,
        where: Sequence[MetadataCondition | str] = (),
        **options: Unpack[QueryOptions],
    ) -> SearchResult:
        """One search; `image` may be encoded bytes or a file path; `where` metadata
        conditions, every one must hold — MetadataCondition values or text ("split=test",
        "split IN train,dev", "year>=2000", typed by the server's metadata schema:
        service/where.py). The options are `SearchQuery.of`'s (`QueryOptions`): concepts by id
        (int), label ("+12") or name in `require` / `exclude`; `scope` (any, local, global)
        restricts them to concepts of that CDS scope; `min_recall` the recall@k the search
        must reach (an approximate index then searches at the fastest tuned operating point
        reaching it); `plan` "auto", "direct", "funnel" or a SearchPlan (a funnel's shortlist
        prefix and factor; `result.plan` says which plan ran); `group_by` a metadata column:
        top k groups of `group_size` hits (1), `result.groups` by group."""
        query = SearchQuery.of(
            text, image=_image_bytes(image), vector=vector, where=self.conditions(where), **options
        )
        response = self._call("Search", requests.search_request(query))
        return responses.search_result(response)

    def batch_search(self, queries: Sequence[SearchQuery]) -> list[SearchResult]:
        """Several searches in one call (build them with `SearchQuery.of`)."""
        request = pb.BatchSearchRequest(requests=[requests.search_request(q) for q in queries])
        response = self._call("BatchSearch", request)
        return [responses.search_result(r) for r in response.responses]

    def explain(
        self,
        text: str | None = None,
        *,
        item_id: str | None = None,
        row: int | None = None,
        image: bytes | str | Path | None = None,
        vector: Sequence[float] | None = None,
        near_captions: int = 0,
    ) -> Explanation:
        """Why an item (by id or row) matches a query; `query_description` and
        `item_description` describe both codes, with `near_captions` (≤ 20) nearest gallery
        captions each (0: the phrases only)."""
        query = SearchQuery.of(text, image=_image_bytes(image), vector=vector)
        request = pb.ExplainRequest(
            query=requests.query_to_proto(query), near_captions=near_captions
        )
        if item_id is not None:
            request.item_id = item_id
        if row is not None:
            request.row = row
        return responses.explanation(self._call("Explain", request))

    def list_concepts(
        self,
        name_contains: str = "",
        page_size: int = 0,
        page_token: str = "",
        include_below_floor: bool = False,
    ) -> ConceptPage:
        request = pb.ListConceptsRequest(
            name_contains=name_contains,
            page_size=page_size,
            page_token=page_token,
            include_below_floor=include_below_floor,
        )
        return responses.concept_page(self._call("ListConcepts", request))

    def get_concept(self, concept: ConceptRef | str | int) -> list[ConceptInfo]:
        """Every concept an id, label or name stands for."""
        request = pb.GetConceptRequest(
            concept=requests.concept_ref_to_proto(ConceptRef.parse(concept))
        )
        response = self._call("GetConcept", request)
        return [responses.concept_info(c) for c in response.concepts]

    def index_info(self) -> IndexInfo:
        response = self._call("GetIndexInfo", pb.GetIndexInfoRequest())
        info = responses.index_info(response)
        self._schema = info.metadata_schema
        return info

    def conditions(self, where: Sequence[MetadataCondition | str]) -> list[MetadataCondition]:
        """Conditions as given, text ones parsed against the server's metadata schema (asked
        once per client); QueryError naming a condition that does not read."""
        if any(isinstance(c, str) for c in where) and self._schema is None:
            self.index_info()
        return [
            c if isinstance(c, MetadataCondition) else parse_where(c, self._schema or {})
            for c in where
        ]


def _pem(value: bytes | str | Path) -> bytes:
    if isinstance(value, bytes):
        return value
    path = Path(value).expanduser()
    if not path.is_file():
        raise ServiceError(f"root certificates file not found: {path}")
    return path.read_bytes()


def _image_bytes(image: bytes | str | Path | None) -> bytes | None:
    if image is None or isinstance(image, bytes):
        return image
    path = Path(image).expanduser()
    if not path.is_file():
        raise ServiceError(f"image file not found: {path}")
    return path.read_bytes()
