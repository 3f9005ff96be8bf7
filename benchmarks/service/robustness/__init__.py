"""Benchmarks of what the service refuses and survives: fuzzed and malformed requests (gRPC and
HTTP), the requests at every limit, the CLI's errors, the heaviest request beside small ones,
shutdown under load and a long soak. Each runs as `python -m benchmarks.service.robustness.X`."""
