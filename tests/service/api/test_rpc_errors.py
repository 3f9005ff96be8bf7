"""The one mapping of the service's errors to gRPC statuses and messages."""

from __future__ import annotations

import grpc
import pytest

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
from service.serving.hot_swap import SwapError
from training.core.errors import InputError


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
