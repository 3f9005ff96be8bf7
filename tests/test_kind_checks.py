"""Nothing but the factory asks which index kind or engine it holds.

Every served index answers one interface (indexer.format.served_index), and every engine one
scorer protocol (service.engine.scoring); an `isinstance` on a FAISS index type, a store-served
kind (StoreIndex, StoreRerank) or a scorer type (LocalScorer, MilvusScorer) outside the factory
is a kind leaking into its callers. This counts them per file under the product packages; run
as a script for the report:

    python tests/test_kind_checks.py
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("training", "indexer", "service")
SKIPPED = ("service/_generated",)
KIND_NAMES = frozenset({"StoreIndex", "StoreRerank", "LocalScorer", "MilvusScorer"})
# the factories that open each kind, where telling kinds apart is their job
FACTORIES = frozenset({"indexer/format/served_index.py"})
CEILING = 3  # the target: nothing outside the factory asks which kind it holds


def _is_kind(node: ast.expr) -> bool:
    """A type expression naming a FAISS type (faiss.X), a store-served kind or a scorer."""
    if isinstance(node, ast.Tuple | ast.BinOp):
        parts = node.elts if isinstance(node, ast.Tuple) else [node.left, node.right]
        return any(_is_kind(p) for p in parts)
    if isinstance(node, ast.Attribute):
        return (isinstance(node.value, ast.Name) and node.value.id == "faiss") or (
            node.attr in KIND_NAMES
        )
    return isinstance(node, ast.Name) and node.id in KIND_NAMES


def kind_checks(root: Path = ROOT) -> Counter[str]:
    """isinstance calls on index, store or scorer kinds, per file (relative path)."""
    counts: Counter[str] = Counter()
    for package in PRODUCT:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative.startswith(SKIPPED) or relative in FACTORIES:
                continue
            for node in ast.walk(ast.parse(path.read_text(), relative)):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "isinstance"
                    and len(node.args) == 2
                    and _is_kind(node.args[1])
                ):
                    counts[relative] += 1
    return counts


def test_kinds_stay_behind_the_interface() -> None:
    counts = kind_checks()
    assert sum(counts.values()) <= CEILING, dict(counts)


if __name__ == "__main__":
    found = kind_checks()
    for file, n in found.most_common():
        print(f"{n:4d}  {file}")
    print(f"{sum(found.values()):4d}  in {len(found)} files")
    sys.exit(0)
