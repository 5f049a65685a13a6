"""`DSDR_CHECK_FAST=1`: a test without the `slow` mark that loads a real model fails.

`make test-fast` (`-m "not vllm and not slow and not browser"`) is fast only while every test that
loads SmolLM2-135M or the MiniLM sentence encoder carries the `slow` mark; 48 had crept in unmarked
(issue 23). The guard wraps the two loaders every such test goes through, whatever the import style
of the code under test: `transformers.PreTrainedModel.from_pretrained` (a model over
MAX_FAST_PARAMETERS parameters: the tiny random Llama the fast tests use has ~3.2M, SmolLM2 135M) and
`sentence_transformers.SentenceTransformer.__init__` (every sentence encoder is a real download-sized
model; fast tests pass a stub encoder). A child process inherits DSDR_CHECK_FAST and
DSDR_CHECK_FAST_REPORT, and tests/helpers/fast_guard_site/sitecustomize.py installs the same guard there,
writing what it caught to that file, so a CLI started by a fast test that loads SmolLM2 is caught too.
"""

from __future__ import annotations

import functools
import importlib.abc
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

MAX_FAST_PARAMETERS = 20_000_000
REPORT_ENV = "DSDR_CHECK_FAST_REPORT"  # the file a child process appends what it caught to
SITE_DIR = Path(__file__).resolve().parent / "fast_guard_site"


def enabled() -> bool:
    return os.environ.get("DSDR_CHECK_FAST") == "1"


def install(caught: Callable[[str], None]) -> None:
    """Wrap both loaders once their modules are imported (now, or when the code under test first
    imports them: importing transformers here would cost every child process seconds); ``caught(what)``
    is called after a real model loaded (it may raise)."""
    hooks = {"transformers.modeling_utils": lambda module: _wrap_models(module.PreTrainedModel, caught),
             "sentence_transformers": lambda module: _wrap_encoder(module.SentenceTransformer, caught)}
    for name in [name for name in hooks if name in sys.modules]:
        hooks.pop(name)(sys.modules[name])
    if hooks:
        sys.meta_path.insert(0, _AfterImport(hooks))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``hooks[name](module)`` right after module ``name`` has been executed."""

    def __init__(self, hooks: dict[str, Callable[[ModuleType], None]]) -> None:
        self.hooks = hooks

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.hooks:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        hook, execute = self.hooks.pop(name), spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            hook(module)

        spec.loader.exec_module = exec_module
        return spec


def _wrap_models(model_class: type, caught: Callable[[str], None]) -> None:
    load = model_class.from_pretrained.__func__

    @functools.wraps(load)
    def from_pretrained(cls: type, *args: Any, **kwargs: Any) -> Any:
        model = load(cls, *args, **kwargs)
        size = sum(p.numel() for p in model.parameters())
        if size > MAX_FAST_PARAMETERS:
            where = args[0] if args else kwargs.get("pretrained_model_name_or_path")
            caught(f"{cls.__name__}.from_pretrained({str(where)!r}) loaded {size / 1e6:.0f}M parameters")
        return model

    model_class.from_pretrained = classmethod(from_pretrained)


def _wrap_encoder(encoder_class: type, caught: Callable[[str], None]) -> None:
    init = encoder_class.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        where = args[0] if args else kwargs.get("model_name_or_path")
        caught(f"SentenceTransformer({str(where)!r}) loaded a sentence encoder")

    encoder_class.__init__ = __init__


def child_env(report: Path) -> dict[str, str]:
    """The variables that make a child Python process run the guard and append to ``report``."""
    path = os.environ.get("PYTHONPATH", "")
    return {REPORT_ENV: str(report), "PYTHONPATH": os.pathsep.join(p for p in (str(SITE_DIR), path) if p)}


def append_report(what: str) -> None:
    """In a child process: record a load for the parent's check (the child itself carries on)."""
    with open(os.environ[REPORT_ENV], "a", encoding="utf-8") as fh:
        fh.write(f"pid {os.getpid()}: {what}\n")
