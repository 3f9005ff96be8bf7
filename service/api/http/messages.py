"""The HTTP API's messages and calls: JSON bodies and query parameters ↔ protobuf messages,
errors as HTTP statuses, the `Strata-Timeout` deadline, bodies read with a limit, and calls
cancelled when their client disconnects (service/api/http/app.py routes them)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable
from typing import TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from service.api.grpc.rpc_errors import status_message, status_of
from service.errors import (
    OverloadedError,
    QueryError,
    bounded,
    echo,
)

T = TypeVar("T")

TIMEOUT_HEADER = "strata-timeout"
JSON_DEPTH = 64  # nesting of a JSON body at most (the messages nest 5 deep)

HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}  # anything else: 500


class BodyTooLargeError(OverloadedError):
    """A request body over the HTTP API's limit: refused unread (413, RESOURCE_EXHAUSTED)."""


class HttpCallContext:
    """What the servicer and the metrics read of one HTTP call: its deadline (time_remaining,
    as grpc.aio's context gives it) and the status it ended with (code)."""

    def __init__(self, timeout_s: float | None = None) -> None:
        self._deadline: float | None = None
        self._code: grpc.StatusCode | None = None
        self.set_timeout(timeout_s)

    def set_timeout(self, timeout_s: float | None) -> None:
        self._deadline = None if timeout_s is None else time.monotonic() + timeout_s

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code


def http_status(code: grpc.StatusCode) -> int:
    return HTTP_STATUS.get(code, 500)


def error_response(error: BaseException) -> JSONResponse:
    """The JSON error answer of an error: its gRPC status as HTTP, and the gRPC message."""
    code = status_of(error)
    status = 413 if isinstance(error, BodyTooLargeError) else http_status(code)
    body = {"error": {"code": status, "status": code.name, "message": status_message(error)}}
    # a body refused unread leaves its bytes on the connection: close it after the answer
    headers = {"connection": "close"} if status == 413 else None
    return JSONResponse(body, status_code=status, headers=headers)


def render(message: Message) -> bytes:
    """A message in the canonical JSON mapping, every field written (defaults too)."""
    value = json_format.MessageToDict(message, always_print_fields_with_no_presence=True)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def parse_message(body: bytes, message_class: type[Message]) -> Message:
    """A request message from its JSON; QueryError naming the fault (an empty body is the
    empty message)."""
    message = message_class()
    if not body.strip():
        return message
    name = message.DESCRIPTOR.full_name
    try:
        json_format.Parse(body.decode("utf-8"), message, max_recursion_depth=JSON_DEPTH)
    except UnicodeDecodeError:
        raise QueryError(f"the body is not UTF-8 JSON ({name} expected)") from None
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise QueryError(bounded(f"the body is not a valid {name} in JSON: {exc}")) from None
    return message


def query_message(params: dict[str, str], message_class: type[Message]) -> Message:
    """A request message from query parameters (field names, either spelling; a bool field's
    `true` / `false` as text)."""
    message = message_class()
    flags = {
        name
        for field in message.DESCRIPTOR.fields
        if field.type == FieldDescriptor.TYPE_BOOL
        for name in (field.name, field.json_name)
    }
    values: dict[str, object] = {
        key: {"true": True, "false": False}.get(value, value) if key in flags else value
        for key, value in params.items()
    }
    try:
        json_format.ParseDict(values, message, max_recursion_depth=JSON_DEPTH)
    except (json_format.ParseError, ValueError, TypeError) as exc:
        name = message.DESCRIPTOR.full_name
        raise QueryError(bounded(f"the query parameters are no valid {name}: {exc}")) from None
    return message


def timeout_of(request: Request) -> float | None:
    value = request.headers.get(TIMEOUT_HEADER)
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < 86_400:
        raise QueryError(f"{TIMEOUT_HEADER} {echo(value)} is no number of seconds in (0, 86400)")
    return seconds


async def read_body(request: Request, most: int) -> bytes:
    """The body, refused (BodyTooLargeError) as soon as it is known to exceed `most` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > most:
        raise BodyTooLargeError(f"a request body of {int(declared)} bytes; at most {most}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > most:
            raise BodyTooLargeError(f"a request body over {most} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def unless_disconnected(call: Awaitable[T], request: Request) -> T:
    """`call`'s answer, or ClientDisconnect as soon as the client goes away while it runs: the
    call is cancelled then, as gRPC cancels a call whose client left (its queries still waiting
    leave the micro-batcher's queue, so no work is done for nobody)."""
    task = asyncio.ensure_future(call)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the endpoint itself is cancelled (the server stopping)
        task.cancel()
        watch.cancel()
        raise
    watch.cancel()
    if task not in done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)  # its cancellation, nothing else
        raise ClientDisconnect()
    return task.result()


async def _disconnected(request: Request) -> None:
    """Returns when the ASGI server says the client disconnected (the body is read by then:
    what else arrives is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
