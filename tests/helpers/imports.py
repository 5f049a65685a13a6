"""Read a package's imports from its source (``ast``), for the layout tests of dsdr_train: which
modules each module imports (lazy and ``TYPE_CHECKING`` imports included: a type-only import
still ties the two modules together for a reader and a type checker) and which ``_private`` names
it takes from other modules."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Import:
    """One imported name: ``module`` (absolute), ``name`` (None for ``import module``), line."""

    module: str
    name: str | None
    line: int


def module_names(package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package`` (a folder under the repo)."""
    out: dict[str, Path] = {}
    for path in sorted((REPO / package).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(module: str, path: Path) -> list[Import]:
    """Every import statement of the module, at any depth (functions, ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(Import(alias.name, None, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.extend(Import(base, alias.name, node.lineno) for alias in node.names)
    return out


def private_attribute_uses(path: Path) -> list[tuple[int, str]]:
    """``X._name`` where ``X`` is a name the module imported (another module's private function,
    or a private method called on an imported class): (line, "X._name")."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    imported = {(alias.asname or alias.name).split(".")[0] for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    return [(node.lineno, f"{node.value.id}.{node.attr}") for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imported
            and _is_private(node.attr)]


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(module: str, path: Path, known: set[str]) -> list[str]:
    """``_private`` names this module imports from another module, as "file:line: module.name".
    A private MODULE (``pkg._checks``) is private to its package: its siblings may import it."""
    rel = path.relative_to(REPO)
    found = []
    for imp in imports_of(module, path):
        parts = imp.module.split(".")
        if imp.name is not None and f"{imp.module}.{imp.name}" in known:  # `from pkg import _module`
            parts = [*parts, imp.name]
            name = None
        else:
            name = imp.name
        for i, part in enumerate(parts):
            parent = ".".join(parts[:i])
            if _is_private(part) and not (module == parent or module.startswith(parent + ".")):
                found.append(f"{rel}:{imp.line}: {imp.module} (private module {'.'.join(parts[:i + 1])})")
        if name is not None and _is_private(name):
            found.append(f"{rel}:{imp.line}: {imp.module}.{name}")
    return found
