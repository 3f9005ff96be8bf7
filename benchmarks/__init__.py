"""Benchmarks: scripts that measure the product and print their figures, beside it, not in it.

    python -m benchmarks.<stage>.<name> --help        (from the repository's root)

One subpackage per stage of the data flow, `training` → `indexer` → `service`, and `harness`,
what every script shares (its argument parser, publishing its JSON, interleaved timing).
Benchmarks may import any module of Strata; no module of `training`, `indexer` or `service`
imports them (tests/test_layering.py), and the wheel leaves them out (pyproject.toml). Their
figures, with the command behind each, are in docs/benchmarks.md.
"""
