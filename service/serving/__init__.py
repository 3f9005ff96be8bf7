"""Serving an engine to many callers: micro-batching, the served engine and its hot swaps
(Redis version channel, Milvus alias), work on daemon threads, and the Prometheus series."""
