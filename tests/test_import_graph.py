"""No import cycles among the project's own modules (dsdr_eval, dsdr_train, dashboards).

The graph is read from the source with ``ast``: every ``import`` / ``from ... import`` of one of
these packages, at module level AND inside functions (a lazy import still closes a circle the
moment it runs), plus ``importlib.import_module("literal")``. Imports under ``if TYPE_CHECKING:``
never run and are left out. Importing ``a.b.c`` first runs ``a/__init__`` and ``a/b/__init__``, so
the importer also depends on those packages, except on its own ancestors (they are already
initialised when it runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("dsdr_eval", "dsdr_train", "dashboards")


def _module_names() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    """Every dotted name this module imports (candidates; not yet matched to modules)."""
    names: list[str] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package_parts = module.split(".") if is_package else module.split(".")[:-1]
                anchor = package_parts[: len(package_parts) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import submodule`
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.append(node.args[0].value)
        stack.extend(ast.iter_child_nodes(node))
    return names


def import_graph() -> dict[str, set[str]]:
    modules = _module_names()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        own_ancestors = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
        for name in _imported_names(tree, module, path.name == "__init__.py"):
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # the module itself and the packages it runs first
                target = ".".join(parts[:i])
                if target in modules and target != module and target not in own_ancestors:
                    graph[module].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(root: str) -> None:  # iterative: no recursion limit on a long chain
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return components


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One concrete cycle per strongly connected component of more than one module."""
    return [_one_cycle(graph, component) for component in strongly_connected(graph)]


def _one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A concrete circle a -> ... -> a inside one strongly connected component (BFS back to a)."""
    members, start = set(component), component[0]
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if child not in parents:
                    parents[child] = node
                    following.append(child)
        frontier = following
    return component


def test_the_graph_sees_lazy_imports_and_packages():
    graph = import_graph()
    assert "dsdr_eval.cli" in graph and "dsdr_eval.cli.run" in graph
    # `dsdr-eval run` imports the library inside a function, and the library its steps: those edges
    # must be in the graph.
    assert "dsdr_eval.run.evaluation" in graph["dsdr_eval.cli.run"]
    assert "dsdr_eval.run.generate" in graph["dsdr_eval.run.evaluation"]


def test_synthetic_cycle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    graph = import_graph()
    components = strongly_connected(graph)
    assert not components, "import cycles: " + "; ".join(
        f"{' -> '.join(_one_cycle(graph, c))} (circle of {len(c)} modules: {', '.join(c)})" for c in components)


CLI = "dsdr_eval.cli"


def cli_importers(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> dsdr_eval.cli...`` for every module outside ``dsdr_eval.cli`` that imports the CLI (the
    library, the trainer and the dashboard may not: the CLI is built on the library, never the reverse)."""
    return sorted(f"{module} -> {target}" for module, targets in graph.items()
                  if module != CLI and not module.startswith(CLI + ".")
                  for target in targets if target == CLI or target.startswith(CLI + "."))


def test_the_library_never_imports_the_cli():
    assert cli_importers(import_graph()) == []


def test_a_library_import_of_the_cli_is_found():
    graph = {"dsdr_eval.api.public": {"dsdr_eval.cli.args"}, "dsdr_eval.cli.run": {"dsdr_eval.api.public"},
             "dsdr_eval.cli": set(), "dsdr_eval.cli.args": set(), "dsdr_train.cli": {"dsdr_eval.cli"}}
    assert cli_importers(graph) == ["dsdr_eval.api.public -> dsdr_eval.cli.args", "dsdr_train.cli -> dsdr_eval.cli"]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph collapsed to packages of the first two name levels (``dsdr_eval.grading``,
    ``dsdr_eval.rundir``; a top-level module is its own node): a package that imports another which imports
    it back is one concept split in two, however its modules avoid a module-level circle."""
    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    collapsed: dict[str, set[str]] = {package(module): set() for module in graph}
    for module, targets in graph.items():
        collapsed[package(module)].update(package(t) for t in targets if package(t) != package(module))
    return collapsed


def test_no_package_cycles():
    """grading -> rundir (DEFAULT_BENCHMARK) -> protocols -> grading was one (issue 46): the schema's names
    live in the leaf dsdr_eval.names. Mutant 'grading.grade imports DEFAULT_BENCHMARK from rundir.samples':
    fails, naming the circle."""
    graph = package_graph(import_graph())
    components = strongly_connected(graph)
    assert not components, "package cycles: " + "; ".join(" -> ".join(_one_cycle(graph, c)) for c in components)
