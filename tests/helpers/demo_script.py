"""`examples/demo.py` as a module: the demo is a script beside the examples, not part of the library."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"  # tests/helpers/demo_script.py


def load_demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dsdr_demo", DEMO)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
