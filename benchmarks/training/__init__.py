"""Training benchmarks: each prints its figures and writes them as JSON (not part of the tests)."""
