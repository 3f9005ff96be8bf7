"""A query before it meets the index: its checks, its embedding (and the Redis cache of text
embeddings, with the circuit breaker around Redis), its routing to a granularity, and the
translator that serves an older bundle to a newer model's queries."""
