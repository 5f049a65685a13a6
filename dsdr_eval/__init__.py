"""dsdr_eval: evaluation and analysis harness for reasoning LLMs.

The Python API (docs/python_api.md): ``evaluate``, ``score``, ``import_results``, ``diversity``,
``judge``, ``report``, ``sweep``, ``audit``, ``merge`` (one per ``dsdr-eval`` subcommand, same options) and ``load_run``. They
are imported on first use, so ``import dsdr_eval`` stays cheap (the CLI's ``--help`` and the dashboard
import the package). No subpackage shares an API function's name: importing ``dsdr_eval.X`` sets the
attribute ``X`` of this package, which would replace a function ``X``.
"""

__version__ = "0.1.0"

_API = {"evaluate": "dsdr_eval.api.public", "score": "dsdr_eval.api.public",
        "import_results": "dsdr_eval.api.public", "diversity": "dsdr_eval.api.public",
        "judge": "dsdr_eval.api.public", "report": "dsdr_eval.api.public",
        "sweep": "dsdr_eval.api.public", "audit": "dsdr_eval.api.public", "merge": "dsdr_eval.api.public",
        "load_run": "dsdr_eval.rundir.results"}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> object:  # PEP 562: the API functions load on first use (no typing import)
    if name not in _API:
        raise AttributeError(f"module 'dsdr_eval' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_API[name]), name)


def __dir__() -> list[str]:
    return sorted(__all__)
