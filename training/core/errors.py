"""Errors a user can act on. The CLI prints them as one line; anything else is a bug."""


class InputError(ValueError):
    """Bad input from the user: a missing path, an unknown encoder, a malformed file."""


class CacheError(InputError):
    """An embedding cache that is incomplete, inconsistent or was made by another job."""
