"""The package's shape: no circular imports, no arrow running back up the data flow.

    training.core  ←  training.*  ←  indexer  ←  service  ←  benchmarks

`training.core` holds what every stage shares and imports nothing else of Strata; a stage may
import the stages before it, never one after it. `benchmarks` (the top-level package beside the
product, not in its wheel) may import every stage (and borrow the tests' throwaway servers and
request fuzz), and only its own tests (tests/benchmarks/) import it. Inside training and
indexer, the subpackages are ordered (TRAINING_ORDER, INDEXER_ORDER); inside service, the same
way:

    service (errors, results, limits, where)  ←  query  ←  engine  ←  serving
        ←  api.grpc  ←  api.http  ←  api (the server running both)  ←  cli

(`python -m service`, service/__main__.py, is the command line's entry: cli's layer.) Imports
inside functions count: a lazy import is still an arrow. Run as a script for the report
(module and edge counts, cycles, upward arrows).
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

import setuptools

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("training", "indexer", "service")
BENCHMARKS = "benchmarks"
PACKAGES = (*PRODUCT, BENCHMARKS)
SKIPPED = ("service/_generated",)
# where the benchmarks lived inside the packages, and the ablation script inside training.grasp
OLD_LOCATIONS = (*(f"{stage}.{BENCHMARKS}" for stage in PRODUCT), "training.grasp.ablation")


def layer(module: str) -> int:
    """0 for training.core, 1 for the rest of training, 2 for indexer, 3 for service, 4 for
    benchmarks."""
    if module == "training.core" or module.startswith("training.core."):
        return 0
    return {"training": 1, "indexer": 2, "service": 3, BENCHMARKS: 4}[module.split(".")[0]]


SERVICE_LAYERS = (
    "service",
    "service.query",
    "service.engine",
    "service.serving",
    "service.api.grpc",
    "service.api.http",
    "service.api",
    "service.cli",
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


def modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(SKIPPED):
                continue
            name = relative[:-3].replace("/", ".").removesuffix(".__init__")
            found[name] = path
    return found


def imported_names(name: str, path: Path) -> set[str]:
    """Every dotted name a module's imports mention: `a.b` and `a.b.c` for `from a.b import c`
    (any depth in the file, relative ones resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.update([base] + [f"{base}.{alias.name}" for alias in node.names])
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the Strata modules it imports (any depth in the file, relative ones resolved)."""
    known = modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        edges[name].update(t for t in imported_names(name, path) if t in known and t != name)
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


def test_benchmarks_import_every_stage_and_nothing_imports_them() -> None:
    edges = import_graph()
    reached = {
        target.split(".")[0]
        for source, targets in edges.items()
        if source.split(".")[0] == BENCHMARKS
        for target in targets
    }
    assert reached == set(PACKAGES)
    product_imports = sorted(
        (source, target)
        for source, targets in edges.items()
        if source.split(".")[0] in PRODUCT
        for target in targets
        if target.split(".")[0] == BENCHMARKS
    )
    assert product_imports == []


# what the benchmarks borrow of the tests' equipment: throwaway servers, the request fuzz
BORROWED_FROM_TESTS = ("tests.servers", "tests.robustness.fuzz")


def test_tests_test_and_benchmarks_measure() -> None:
    """Only the benchmarks' own tests (tests/benchmarks/) import `benchmarks`; the product imports
    nothing of the tests; the benchmarks borrow only BORROWED_FROM_TESTS."""
    everywhere = modules((*PACKAGES, "tests"))
    arrows = sorted(
        (name, imported.split(".")[0] if imported.startswith(BENCHMARKS) else imported)
        for name, path in everywhere.items()
        for imported in imported_names(name, path)
        if imported.split(".")[0] in (BENCHMARKS, "tests")
    )
    into_benchmarks = {
        name for name, target in arrows if target == BENCHMARKS and name.split(".")[0] == "tests"
    }
    assert into_benchmarks and all(n.startswith("tests.benchmarks.") for n in into_benchmarks), (
        sorted(n for n in into_benchmarks if not n.startswith("tests.benchmarks."))
    )
    product_into_tests = [(n, t) for n, t in arrows if n.split(".")[0] in PRODUCT]
    assert product_into_tests == []
    borrowed = {
        t for n, t in arrows if n.split(".")[0] == BENCHMARKS and t.split(".")[0] == "tests"
    }
    assert borrowed and all(t.startswith(BORROWED_FROM_TESTS) for t in borrowed), borrowed


def test_a_planted_import_of_benchmarks_is_an_upward_arrow() -> None:
    edges = {
        "service.cli.main": {"benchmarks.harness"},
        "benchmarks.service.load": {"service.cli.main", "training.core.errors"},
        "benchmarks.harness": set(),
        "training.core.errors": set(),
    }
    assert upward_arrows(edges) == [("service.cli.main", "benchmarks.harness")]


def test_the_benchmarks_left_the_packages() -> None:
    for old in OLD_LOCATIONS:
        path = ROOT / old.replace(".", "/")
        assert not path.is_dir() and not path.with_suffix(".py").exists(), old
    everywhere = modules((*PACKAGES, "tests"))
    stale = sorted(
        (name, imported)
        for name, path in everywhere.items()
        for imported in imported_names(name, path)
        if any(imported == old or imported.startswith(f"{old}.") for old in OLD_LOCATIONS)
    )
    assert stale == []


def test_the_wheel_leaves_benchmarks_and_tests_out() -> None:
    """The packages pyproject.toml's discovery finds, as setuptools finds them for the wheel."""
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = setuptools.find_packages(
        str(ROOT), include=find["find"]["include"], exclude=find["find"].get("exclude", ())
    )
    assert {name.split(".")[0] for name in found} == set(PRODUCT)
    assert "training.core" in found and "service.cli" in found


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


# --- inside training and indexer: subpackages, each importing only those before it ------------

# training's subpackages and top-level modules (loop.py, probes.py, cli.py), in data-flow order
TRAINING_ORDER = (
    "core",
    "corpora",
    "views",
    "embedding",
    "loop",
    "probes",
    "sae",
    "grasp",
    "cedar",
    "synthetic",
    "cosae",
    "cds",
    "cli",
)
INDEXER_ORDER = ("format", "vocabulary", "verify", "versions", "build", "update", "milvus", "cli")
STAGE_ORDERS = {"training": TRAINING_ORDER, "indexer": INDEXER_ORDER}
INDEXER_FOLDER_LIMIT = 20  # modules in one folder


def subpackage(module: str, stage: str) -> str | None:
    """`build` for indexer.build.full (stage indexer), `loop` for training.loop; None outside
    the stage and for the stage's package itself."""
    parts = module.split(".")
    return parts[1] if parts[0] == stage and len(parts) > 1 else None


def stage_upward_arrows(edges: dict[str, set[str]], stage: str) -> list[tuple[str, str]]:
    """Imports, inside a stage, of a subpackage later in its order (STAGE_ORDERS)."""
    rank = {name: position for position, name in enumerate(STAGE_ORDERS[stage])}
    return sorted(
        (source, target)
        for source, targets in edges.items()
        for target in targets
        if (a := subpackage(source, stage)) in rank
        and (b := subpackage(target, stage)) in rank
        and rank[b] > rank[a]
    )


def subpackage_graph(edges: dict[str, set[str]], stage: str) -> dict[str, set[str]]:
    """The import graph with a stage's modules collapsed into its subpackages."""
    graph: dict[str, set[str]] = defaultdict(set)
    for source, targets in edges.items():
        a = subpackage(source, stage)
        if a is None:
            continue
        graph[a].update(b for t in targets if (b := subpackage(t, stage)) not in (None, a))
    for targets in list(graph.values()):
        for target in targets:
            graph.setdefault(target, set())
    return dict(graph)


def test_every_training_and_indexer_module_lives_in_a_named_place() -> None:
    graph = import_graph()
    for stage, order in STAGE_ORDERS.items():
        found = {subpackage(name, stage) for name in graph} - {None}
        assert found == set(order), stage
    loose = [p.name for p in (ROOT / "indexer").glob("*.py") if p.name != "__init__.py"]
    assert loose == []


def test_no_indexer_folder_holds_more_than_the_limit() -> None:
    for folder in [ROOT / "indexer", *(ROOT / "indexer" / name for name in INDEXER_ORDER)]:
        count = len([p for p in folder.glob("*.py") if p.name != "__init__.py"])
        assert count <= INDEXER_FOLDER_LIMIT, f"{folder.relative_to(ROOT)}: {count} modules"


def test_subpackages_import_only_those_before_them() -> None:
    graph = import_graph()
    for stage in STAGE_ORDERS:
        assert stage_upward_arrows(graph, stage) == [], stage


def test_subpackages_import_in_no_circle() -> None:
    graph = import_graph()
    for stage in STAGE_ORDERS:
        assert cycles(subpackage_graph(graph, stage)) == [], stage


def test_a_planted_upward_arrow_inside_indexer_is_found() -> None:
    edges = {
        "indexer.format.bundle": {"indexer.versions.publish"},
        "indexer.versions.publish": {"indexer.format.bundle"},
        "indexer.cli.index": {"indexer.build.full", "training.core.errors"},
        "indexer.build.full": set(),
    }
    assert stage_upward_arrows(edges, "indexer") == [
        ("indexer.format.bundle", "indexer.versions.publish")
    ]
    assert cycles(subpackage_graph(edges, "indexer")) == [["format", "versions"]]


def test_a_planted_upward_arrow_inside_training_is_found() -> None:
    edges = {
        "training.sae.train": {"training.cedar.train", "training.loop"},
        "training.cedar.train": {"training.sae.base"},
        "training.sae.base": set(),
        "training.loop": set(),
    }
    assert stage_upward_arrows(edges, "training") == [
        ("training.sae.train", "training.cedar.train")
    ]


def stage_report(graph: dict[str, set[str]], stage: str) -> None:
    """A stage's subpackages, their modules, and any arrow or circle between them."""
    subpackages = subpackage_graph(graph, stage)
    for name in STAGE_ORDERS[stage]:
        count = sum(1 for module in graph if subpackage(module, stage) == name)
        print(f"  {stage}.{name}: {count} modules, imports {sorted(subpackages.get(name, ()))}")
    for component in cycles(subpackages):
        print(f"{stage} cycle:", " <-> ".join(component))
    for source, target in stage_upward_arrows(graph, stage):
        print(f"{stage} upward: {source} -> {target}")


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
    into_benchmarks = sum(
        1
        for source, targets in graph.items()
        if layer(source) < 4
        for target in targets
        if layer(target) == 4
    )
    print(f"  imports of benchmarks from the product: {into_benchmarks}")
    for component in cycles(graph):
        print("cycle:", " <-> ".join(component))
    for source, target in upward_arrows(graph):
        print(f"upward: {source} -> {target}")
    for stage in STAGE_ORDERS:
        stage_report(graph, stage)
