"""The service's typed errors: the engine raises them, the gRPC servicer maps each to a status.

All are `InputError`s, so the `strata` command prints them as one line and exits 2.
"""

from __future__ import annotations

from training.core.errors import InputError
from training.core.errors import echo as echo  # how a message quotes a caller's value


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


class UnavailableError(ServiceError):
    """A backend the service depends on (the vector engine) did not answer in time: retry
    later (UNAVAILABLE)."""


class EncoderUnavailableError(ServiceError):
    """A text or image query to a bundle whose encoder this machine cannot load (an imported
    cache's, a synthetic one's, a checkpoint not here): the bundle serves vector queries only
    (FAILED_PRECONDITION)."""


class InternalError(ServiceError):
    """A fault of the server's own in one query (INTERNAL); logged with its traceback."""


MESSAGE_CHARS = 1000  # a status message's length at most, whatever it quotes


def bounded(message: str, most: int = MESSAGE_CHARS) -> str:
    """A status message cut to `most` characters: the last guard, so that no path — a library's
    message quoting an input included — sends a caller back more than a short message."""
    return message if len(message) <= most else f"{message[: most - 1]}…"
