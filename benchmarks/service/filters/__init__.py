"""Benchmarks of filtered search: concept and zero-shot word filters (cost and examples),
metadata conditions, and the descriptions shown beside hits. Each runs as
`python -m benchmarks.service.filters.X`."""
