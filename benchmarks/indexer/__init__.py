"""Indexer benchmarks: each prints its figures and writes them as JSON (not part of the tests).

`synthetic` makes the data they (and the indexer's tests) run on.
"""
