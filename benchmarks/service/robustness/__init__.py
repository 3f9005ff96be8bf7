"""Benchmarks of what the service survives, with figures: the heaviest request beside small
ones, shutdown under load and a long soak. Each runs as `python -m benchmarks.service.robustness.X`.
The pass/fail checks (fuzzed and malformed requests, every limit, the CLI's errors, damaged
versions) are tests: tests/robustness/ holds what they share."""
