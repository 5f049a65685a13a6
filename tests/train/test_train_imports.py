"""The training package's layout, read from the source (tests/helpers/imports.py):

* the engines under ``dsdr_train/integrations/`` build on public functions only: nothing from
  ``dsdr_train.train`` (the compact engine) and no ``_private`` name of another module, imported
  or reached as ``Imported._name`` (the TRL engine once ran ``Trainer._load_prompt_pool`` on a
  stand-in ``self``: any new ``self.x`` there broke ``--engine trl`` unseen);
* no module of dsdr_eval / dsdr_train / dashboards imports another module's ``_private`` name;
* dsdr_train's import graph has no cycle even counting ``TYPE_CHECKING`` imports (tests/
  test_import_graph.py checks the runtime graph of all packages).
"""

from __future__ import annotations

import graphlib

import pytest

from helpers.imports import REPO, imports_of, module_names, private_attribute_uses, private_imports

PACKAGES = ("dsdr_eval", "dsdr_train", "dashboards")


def _all_modules() -> dict:
    out: dict = {}
    for package in PACKAGES:
        out.update(module_names(package))
    return out


def test_integrations_use_no_compact_engine_and_no_private_names():
    modules = module_names("dsdr_train")
    known = set(modules)
    bad = []
    for module, path in modules.items():
        if not module.startswith("dsdr_train.integrations"):
            continue
        rel = path.relative_to(REPO)
        for imp in imports_of(module, path):
            target = imp.module if imp.name is None else f"{imp.module}.{imp.name}"
            if imp.module == "dsdr_train.train" or target == "dsdr_train.train":
                bad.append(f"{rel}:{imp.line}: imports dsdr_train.train")
        bad += private_imports(module, path, known)
        bad += [f"{rel}:{line}: {use}" for line, use in private_attribute_uses(path)]
    assert not bad, "\n".join(sorted(set(bad)))


def test_no_module_imports_a_private_name_of_another_module():
    modules = _all_modules()
    found = set()
    for module, path in modules.items():
        found.update(private_imports(module, path, set(modules)))
    assert not found, "\n".join(sorted(found))


def test_the_private_import_scan_sees_what_it_must(tmp_path):
    """The scanner itself: a private name, a private module of another package (not of its own),
    and ``Imported._method`` are found; a sibling's private module is allowed."""
    from helpers import imports as scan

    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    for name in ("__init__.py", "sub/__init__.py", "sub/_inner.py"):
        (pkg / name).write_text("")
    (pkg / "sub" / "ok.py").write_text("from pkg.sub._inner import thing\n")
    (pkg / "bad.py").write_text("from pkg.sub._inner import thing\nfrom pkg.sub.ok import _helper\n"
                                "from pkg.sub.ok import Trainer\nTrainer._load(None)\n")
    old = scan.REPO
    scan.REPO = tmp_path
    try:
        mods = scan.module_names("pkg")
        assert scan.private_imports("pkg.sub.ok", mods["pkg.sub.ok"], set(mods)) == []
        assert len(scan.private_imports("pkg.bad", mods["pkg.bad"], set(mods))) == 2
        assert scan.private_attribute_uses(mods["pkg.bad"]) == [(4, "Trainer._load")]
    finally:
        scan.REPO = old


def test_dsdr_train_import_graph_is_acyclic_counting_type_checking_imports():
    modules = module_names("dsdr_train")
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        deps = set()
        for imp in imports_of(module, path):
            for target in (imp.module, f"{imp.module}.{imp.name}"):
                if target in modules and target != module and not module.startswith(target + "."):
                    deps.add(target)
        graph[module] = deps
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle in dsdr_train (TYPE_CHECKING imports included): {' -> '.join(exc.args[1])}")
