"""dsdr_eval/__init__.pyi (the API's typed signatures for IDEs and type checkers) is what the option schema
generates (dsdr_eval/api/stubs.py): every keyword, its default and a type from its declaration."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, Literal

import dsdr_eval
from dsdr_eval.models import ResolvedModel
from dsdr_eval.api import stubs
from dsdr_eval.options.commands import COMMANDS
from dsdr_eval.rundir.results import RunResults


def test_the_committed_stub_is_the_generated_one():
    """Mutant 'an Option added to RUN, the stub not regenerated': differs (run `python -m
    dsdr_eval.api.stubs`)."""
    assert stubs.STUB.read_text(encoding="utf-8") == stubs.render(), "run: python -m dsdr_eval.api.stubs"


def test_each_stub_signature_has_the_runtime_keywords_and_valid_types():
    tree = ast.parse(stubs.STUB.read_text(encoding="utf-8"))
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    namespace = {"Callable": Callable, "Sequence": Sequence, "PathLike": PathLike, "Path": Path, "Any": Any,
                 "Literal": Literal, "ResolvedModel": ResolvedModel, "RunResults": RunResults}
    for name, command in stubs.FUNCTIONS.items():
        node = functions[name]
        runtime = inspect.signature(getattr(dsdr_eval, name)).parameters
        stub = [*node.args.args, *node.args.kwonlyargs]
        assert [a.arg for a in stub] == list(runtime), name
        for arg in stub:
            eval(compile(ast.Expression(arg.annotation), name, "eval"), namespace)  # a valid type expression
        declared = {o.name: o for o in COMMANDS[command][0]}
        for arg in stub:
            option = declared.get(arg.arg)
            if option is not None and option.choices:
                assert ast.unparse(arg.annotation).startswith("Literal["), (name, arg.arg)
    flags = [a for a in functions["evaluate"].args.kwonlyargs if a.arg == "no_diversity"]
    assert ast.unparse(flags[0].annotation) == "bool"
    limit = [a for a in functions["evaluate"].args.kwonlyargs if a.arg == "limit"]
    assert ast.unparse(limit[0].annotation) == "int | None"
