"""The one mapping of the service's errors to gRPC statuses and messages."""

from __future__ import annotations

import grpc
import pytest

from service._generated.strata.v1 import search_pb2 as pb
from service.api.grpc.requests import granularity_to_proto
from service.api.grpc.rpc_errors import status_message, status_of
from service.errors import (
    MESSAGE_CHARS,
    DeadlineError,
    InternalError,
    NotFoundError,
    OverloadedError,
    QueryError,
    ServiceError,
)
from service.query.checks import requested_granularity
from service.serving.hot_swap import SwapError
from training.core.errors import InputError
from training.core.granularity import Granularity


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (QueryError("bad"), grpc.StatusCode.INVALID_ARGUMENT),
        (NotFoundError("gone"), grpc.StatusCode.NOT_FOUND),
        (OverloadedError("full"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (DeadlineError("late"), grpc.StatusCode.DEADLINE_EXCEEDED),
        (InternalError("bug"), grpc.StatusCode.INTERNAL),
        (ServiceError("refused"), grpc.StatusCode.FAILED_PRECONDITION),
        (SwapError("another encoder"), grpc.StatusCode.FAILED_PRECONDITION),
        (InputError("not a ServiceError"), grpc.StatusCode.INTERNAL),
        (RuntimeError("a surprise"), grpc.StatusCode.INTERNAL),
    ],
)
def test_each_error_maps_to_its_status(error: BaseException, status: grpc.StatusCode):
    assert status_of(error) == status


def test_messages_are_the_errors_own_or_internal_and_bounded():
    assert status_message(QueryError("empty text query")) == "empty text query"
    assert status_message(KeyError("x")) == "internal error: 'x'"
    long = status_message(QueryError("x" * 5000))
    assert len(long) == MESSAGE_CHARS and long.endswith("…")


def test_an_unknown_granularity_is_invalid_argument_with_the_one_message():
    """The engine's and the client's readings of a granularity share training's parser and
    message, mapped to QueryError (an unmapped InputError would read as INTERNAL)."""
    message = (
        "unknown granularity 'scene'; choose from auto, object, attribute, relation, caption, full"
    )
    for parse in (requested_granularity, granularity_to_proto):
        with pytest.raises(QueryError) as caught:
            parse("scene")
        assert str(caught.value) == message
        assert status_of(caught.value) == grpc.StatusCode.INVALID_ARGUMENT
    assert granularity_to_proto(" Auto") == granularity_to_proto("") == pb.GRANULARITY_AUTO
    assert granularity_to_proto(Granularity.OBJECT) == pb.GRANULARITY_OBJECT
    assert requested_granularity("CAPTION") is Granularity.CAPTION
