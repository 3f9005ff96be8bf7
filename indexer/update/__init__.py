"""New versions without a rebuild: rows added from a cache, rows deleted by id."""
