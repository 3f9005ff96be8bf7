"""The package's shape: no circular imports, no arrow running back up the data flow.

    training.core  ←  training.*  ←  indexer  ←  service

`training.core` holds what every stage shares and imports nothing else of Strata; a stage may
import the stages before it, never one after it. Inside service, the subpackages are ordered
the same way:

    service (errors, results, limits, where)  ←  query  ←  engine  ←  serving
        ←  api.grpc  ←  api.http  ←  api (the server running both)  ←  cli  ←  benchmarks

(`python -m service`, service/__main__.py, is the command line's entry: cli's layer.) Imports
inside functions count: a lazy import is still an arrow. Run as a script for the report
(module and edge counts, cycles, upward arrows).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("training", "indexer", "service")
SKIPPED = ("service/_generated",)


def layer(module: str) -> int:
    """0 for training.core, 1 for the rest of training, 2 for indexer, 3 for service."""
    if module == "training.core" or module.startswith("training.core."):
        return 0
    return {"training": 1, "indexer": 2, "service": 3}[module.split(".")[0]]


SERVICE_LAYERS = (
    "service",
    "service.query",
    "service.engine",
    "service.serving",
    "service.api.grpc",
    "service.api.http",
    "service.api",
    "service.cli",
    "service.benchmarks",
)
SERVICE_ENTRY = {"service.__main__": "service.cli"}


def service_layer(module: str) -> int:
    """A service module's place in SERVICE_LAYERS: its deepest listed package (0: the root's
    own modules); KeyError for a module in no listed subpackage."""
    module = SERVICE_ENTRY.get(module, module)
    parts = module.split(".")
    if len(parts) == 2 and module not in SERVICE_LAYERS:  # service.errors, service.results, …
        if (ROOT / "service" / parts[1]).is_dir():
            raise KeyError(f"{module}: a service subpackage missing from SERVICE_LAYERS")
        return 0
    for depth in range(len(parts), 0, -1):
        package = ".".join(parts[:depth])
        if package in SERVICE_LAYERS:
            return SERVICE_LAYERS.index(package)
    raise KeyError(module)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(SKIPPED):
                continue
            name = relative[:-3].replace("/", ".").removesuffix(".__init__")
            found[name] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the Strata modules it imports (any depth in the file, relative ones resolved)."""
    known = modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            edges[name].update(t for t in targets if t in known and t != name)
        edges.setdefault(name, set())
    return dict(edges)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(edges)))
    try:
        for node in sorted(edges):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return found


def upward_arrows(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports of a later layer (or, from training.core, of anything outside it; inside
    service, of a later subpackage)."""
    return sorted(
        (source, target)
        for source, targets in edges.items()
        for target in targets
        if layer(target) > layer(source)
        or (layer(source) == 0 and layer(target) != 0)
        or (layer(source) == layer(target) == 3 and service_layer(target) > service_layer(source))
    )


def test_the_graph_covers_every_package() -> None:
    edges = import_graph()
    assert {name.split(".")[0] for name in edges} == set(PACKAGES)
    assert "training.core" in edges


def test_no_circular_imports() -> None:
    assert cycles(import_graph()) == []


def test_no_arrow_runs_back_up_the_data_flow() -> None:
    assert upward_arrows(import_graph()) == []


def test_every_service_module_has_a_layer() -> None:
    placed = {name: service_layer(name) for name in import_graph() if layer(name) == 3}
    assert placed["service.errors"] == 0
    assert placed["service.engine.search"] < placed["service.serving.served_engine"]
    assert placed["service.api.http.app"] > placed["service.api.grpc.servicer"]
    assert placed["service.api.server"] > placed["service.api.http.app"]
    assert placed["service.__main__"] == placed["service.cli"]
    assert {SERVICE_LAYERS[n] for n in placed.values()} == set(SERVICE_LAYERS)


def test_a_planted_cycle_and_upward_arrow_are_found() -> None:
    edges = {
        "training.core.a": {"training.grasp.b"},
        "training.grasp.b": {"training.core.a", "indexer.c"},
        "indexer.c": set(),
    }
    assert cycles(edges) == [["training.core.a", "training.grasp.b"]]
    assert upward_arrows(edges) == [
        ("training.core.a", "training.grasp.b"),
        ("training.grasp.b", "indexer.c"),
    ]


def test_an_upward_arrow_inside_service_is_found() -> None:
    edges = {
        "service.serving.hot_swap": {"service.api.server", "service.engine.search"},
        "service.engine.search": {"service.query.cache"},
        "service.query.cache": {"service.cli"},
        "service.api.server": set(),
        "service.cli": set(),
    }
    assert upward_arrows(edges) == [
        ("service.query.cache", "service.cli"),
        ("service.serving.hot_swap", "service.api.server"),
    ]


# --- inside indexer: its subpackages, each importing only those before it ---------------------

INDEXER_ORDER = ("format", "verify", "versions", "build", "update", "milvus", "cli", "benchmarks")
INDEXER_FOLDER_LIMIT = 20  # modules in one folder


def indexer_subpackage(module: str) -> str | None:
    """`build` for indexer.build.full; None outside indexer and for the package itself."""
    parts = module.split(".")
    return parts[1] if parts[0] == "indexer" and len(parts) > 1 else None


def indexer_upward_arrows(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports, inside indexer, of a subpackage later in INDEXER_ORDER."""
    rank = {name: position for position, name in enumerate(INDEXER_ORDER)}
    return sorted(
        (source, target)
        for source, targets in edges.items()
        for target in targets
        if (a := indexer_subpackage(source)) in rank
        and (b := indexer_subpackage(target)) in rank
        and rank[b] > rank[a]
    )


def indexer_subpackage_graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph with indexer's modules collapsed into their subpackages."""
    graph: dict[str, set[str]] = defaultdict(set)
    for source, targets in edges.items():
        a = indexer_subpackage(source)
        if a is None:
            continue
        graph[a].update(b for t in targets if (b := indexer_subpackage(t)) not in (None, a))
    for targets in list(graph.values()):
        for target in targets:
            graph.setdefault(target, set())
    return dict(graph)


def test_every_indexer_module_lives_in_a_named_subpackage() -> None:
    found = {indexer_subpackage(name) for name in import_graph()} - {None}
    assert found == set(INDEXER_ORDER)
    loose = [p.name for p in (ROOT / "indexer").glob("*.py") if p.name != "__init__.py"]
    assert loose == []


def test_no_indexer_folder_holds_more_than_the_limit() -> None:
    for folder in [ROOT / "indexer", *(ROOT / "indexer" / name for name in INDEXER_ORDER)]:
        count = len([p for p in folder.glob("*.py") if p.name != "__init__.py"])
        assert count <= INDEXER_FOLDER_LIMIT, f"{folder.relative_to(ROOT)}: {count} modules"


def test_indexer_subpackages_import_only_those_before_them() -> None:
    assert indexer_upward_arrows(import_graph()) == []


def test_indexer_subpackages_import_in_no_circle() -> None:
    assert cycles(indexer_subpackage_graph(import_graph())) == []


def test_a_planted_upward_arrow_inside_indexer_is_found() -> None:
    edges = {
        "indexer.format.bundle": {"indexer.versions.publish"},
        "indexer.versions.publish": {"indexer.format.bundle"},
        "indexer.cli.index": {"indexer.build.full", "training.core.errors"},
        "indexer.build.full": set(),
    }
    assert indexer_upward_arrows(edges) == [("indexer.format.bundle", "indexer.versions.publish")]
    assert cycles(indexer_subpackage_graph(edges)) == [["format", "versions"]]


def indexer_report(graph: dict[str, set[str]]) -> None:
    """The subpackages of indexer, their modules, and any arrow or circle between them."""
    subpackages = indexer_subpackage_graph(graph)
    for name in INDEXER_ORDER:
        count = sum(1 for module in graph if indexer_subpackage(module) == name)
        print(f"  indexer.{name}: {count} modules, imports {sorted(subpackages.get(name, ()))}")
    for component in cycles(subpackages):
        print("indexer cycle:", " <-> ".join(component))
    for source, target in indexer_upward_arrows(graph):
        print(f"indexer upward: {source} -> {target}")


if __name__ == "__main__":
    graph = import_graph()
    print(f"modules {len(graph)}, imports {sum(len(t) for t in graph.values())}")
    folder = {name: path.parent for name, path in modules().items()}
    crossing = [(s, t) for s, targets in graph.items() for t in targets if folder[s] != folder[t]]
    top = sum(1 for s, t in crossing if s.split(".")[0] != t.split(".")[0])
    print(f"  imports between folders {len(crossing)}, between top-level packages {top}")
    for package in PACKAGES:
        print(f"  {package}: {sum(1 for name in graph if name.split('.')[0] == package)} modules")
    print(f"  training.core: {sum(1 for name in graph if layer(name) == 0)} modules")
    for index, package in enumerate(SERVICE_LAYERS):
        count = sum(1 for name in graph if layer(name) == 3 and service_layer(name) == index)
        print(f"    {package}{' (root)' if index == 0 else ''}: {count} modules")
    for component in cycles(graph):
        print("cycle:", " <-> ".join(component))
    for source, target in upward_arrows(graph):
        print(f"upward: {source} -> {target}")
    indexer_report(graph)
