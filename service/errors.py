"""The service's typed errors: the engine raises them, the gRPC servicer maps each to a status.

All are `InputError`s, so the `strata` command prints them as one line and exits 2.
"""

from __future__ import annotations

from training.errors import InputError


class ServiceError(InputError):
    """A request the service refuses, with a message that names the fault."""


class QueryError(ServiceError):
    """A malformed request: empty text, a vector of the wrong dimension or holding NaN, top_k
    out of range, an unknown concept or metadata field, an undecodable image (INVALID_ARGUMENT)."""


class NotFoundError(ServiceError):
    """An item or concept that the bundle does not hold (NOT_FOUND)."""


class OverloadedError(ServiceError):
    """The query queue is full: retry later (RESOURCE_EXHAUSTED)."""


class DeadlineError(ServiceError):
    """A query whose deadline passed before it was computed: dropped (DEADLINE_EXCEEDED)."""


class InternalError(ServiceError):
    """A fault of the server's own in one query (INTERNAL); logged with its traceback."""
