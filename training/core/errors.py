"""Errors a user can act on. The CLI prints them as one line; anything else is a bug."""


class InputError(ValueError):
    """Bad input from the user: a missing path, an unknown encoder, a malformed file."""


class CacheError(InputError):
    """An embedding cache that is incomplete, inconsistent or was made by another job."""


ECHO_CHARS = 40  # of any value a caller sent, a message quotes at most this prefix


def echo(value: object, most: int = ECHO_CHARS) -> str:
    """How a message quotes a caller's value: its repr, cut to a prefix of `most` characters
    with the full length said when it was cut (`'aaaa…' (10485760 characters)`)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= most:
        return repr(text)
    return f"{text[:most]!r}… ({len(text)} characters)"
