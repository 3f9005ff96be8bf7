"""Benchmark scripts: each prints its figures and writes them as JSON. Not part of the tests."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def publish(result: dict[str, Any], path: Path) -> dict[str, Any]:
    """Print a benchmark's result and write it as JSON (the file a README figure cites)."""
    text = json.dumps(result, indent=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    print(text)
    return result


def benchmark_parser(doc: str | None) -> argparse.ArgumentParser:
    """The argument parser of a benchmark script, its module docstring as the help text."""
    return argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
