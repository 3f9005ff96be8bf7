"""Service benchmarks: each prints its figures and writes them as JSON. Not part of the tests."""
