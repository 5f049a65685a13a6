"""Faults injected into a child ``dsdr-eval`` process at a chosen moment of its writes (the tests and
benchmarks/rundir_campaign.py share it).

``fault_argv((mode, k, errno, target), args)`` is the command line that runs ``dsdr-eval ARGS`` with:

* ``write``: the k-th file opened for writing through ``os.fdopen`` (what every atomic writer uses)
  fails with ``OSError(errno)`` on its first write (a full disk, a read-only directory);
* ``kill-write``: the process is killed (SIGKILL) right after the first write to the k-th such file
  (a temp file half written);
* ``replace``: the process is killed (SIGKILL) at the k-th ``os.replace`` (between two renames);
* ``open``: reading the file whose name ends with ``target`` fails with EACCES.
"""

from __future__ import annotations

import sys

FAULT = r"""
import errno, os, signal, sys
mode, k, code = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
count = {"n": 0}
if mode in ("write", "kill-write"):
    real = os.fdopen
    class Failing:
        def __init__(self, fh): self.fh = fh
        def write(self, data):
            if mode == "write":
                raise OSError(code, os.strerror(code))
            self.fh.write(data)
            self.fh.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        def __getattr__(self, name): return getattr(self.fh, name)
        def __enter__(self): return self
        def __exit__(self, *exc): self.fh.close()
    def fdopen(fd, mode="r", *a, **kw):
        fh = real(fd, mode, *a, **kw)
        if "w" in mode or "a" in mode:
            count["n"] += 1
            if count["n"] == k:
                return Failing(fh)
        return fh
    os.fdopen = fdopen
elif mode == "replace":
    real = os.replace
    def replace(a, b, *rest, **kw):
        count["n"] += 1
        if count["n"] == k:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(a, b, *rest, **kw)
    os.replace = replace
elif mode == "open":  # EACCES on reading the named file
    import builtins, io
    target = sys.argv[4]
    real_open, real_os_open = builtins.open, os.open
    def deny(path):
        if str(path).endswith(target):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
    def opener(path, *a, **kw):
        deny(path); return real_open(path, *a, **kw)
    def os_opener(path, *a, **kw):
        deny(path); return real_os_open(path, *a, **kw)
    builtins.open = io.open = opener
    os.open = os_opener
    sys.argv.pop(4)
from dsdr_eval.cli import main
sys.exit(main(sys.argv[4:]))
"""

Fault = tuple[str, int, int, str | None]  # (mode, k, errno, target)


def fault_argv(fault: Fault, args: list[str] | tuple[str, ...]) -> list[str]:
    """``python -c FAULT ... ARGS``: ``dsdr-eval ARGS`` with ``fault`` injected (the module docstring)."""
    mode, k, code, target = fault
    return [sys.executable, "-c", FAULT, mode, str(k), str(code), *([target] if target else []), *map(str, args)]
