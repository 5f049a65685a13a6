"""The layout targets of the re-layering stay true: every equation of docs/ALGORITHMS.md has the one
function §7 names, no module of the packages is over 500 lines and no function over 80."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("dsdr_eval", "dsdr_train", "dashboards")
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 500, 80


def _modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (REPO / package).rglob("*.py"))


def _functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _equation_rows() -> list[tuple[str, str, str]]:
    text = (REPO / "docs" / "ALGORITHMS.md").read_text(encoding="utf-8")
    section = text.split("## 7. Where each equation is computed", 1)[1]
    rows = re.findall(r"^\| ([^|]+) \| [^|]+ \| `([^`:]+\.py): (\w+)`", section, flags=re.M)
    return [(eq.strip(), module, name) for eq, module, name in rows]


def test_the_equation_table_covers_every_equation():
    text = (REPO / "docs" / "ALGORITHMS.md").read_text(encoding="utf-8")
    numbered = {int(n) for n in re.findall(r"\(Eq\. (\d+)[a-d]?\)", text)}
    covered: set[int] = set()
    for eq, _, _ in _equation_rows():
        for part in re.findall(r"\d+(?:[a-d]?–\d+)?", eq):
            low, _, high = part.partition("–")
            low_n = int(re.match(r"\d+", low)[0])
            covered.update(range(low_n, int(re.match(r"\d+", high)[0]) + 1) if high else {low_n})
    assert numbered == set(range(1, 21))
    assert numbered <= covered, f"equations without a function in §7: {sorted(numbered - covered)}"


@pytest.mark.parametrize(("equation", "module", "name"), _equation_rows())
def test_each_equation_names_a_function_that_exists(equation, module, name):
    path = REPO / module
    assert path.is_file(), f"Eq. {equation}: {module} does not exist"
    assert name in {node.name for node in _functions(path)}, f"Eq. {equation}: {module} has no function {name}"


def test_no_module_over_500_lines_and_no_function_over_80():
    long_modules, long_functions = [], []
    for path in _modules():
        source = path.read_text(encoding="utf-8")
        if source.count("\n") > MAX_MODULE_LINES:
            long_modules.append(f"{path.relative_to(REPO)}: {source.count(chr(10))} lines")
        for node in _functions(path):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                long_functions.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {length} lines")
    assert not long_modules and not long_functions, "\n".join(long_modules + long_functions)
