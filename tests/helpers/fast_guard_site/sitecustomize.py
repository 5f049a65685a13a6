"""On PYTHONPATH of the child processes a fast test starts (tests/helpers/fast_guard.py): the same loader
guard there, reporting to the file the parent test checks. Loaded by file path, so the tests'
helper modules never shadow anything on the child's sys.path."""

import os

if os.environ.get("DSDR_CHECK_FAST") == "1" and os.environ.get("DSDR_CHECK_FAST_REPORT"):
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        "dsdr_fast_guard", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fast_guard.py"))
    _guard = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_guard)
    _guard.install(_guard.append_report)
