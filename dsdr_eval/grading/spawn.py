"""How grading workers are started: a zygote interpreter that imports math-verify once and forks
warm workers (Linux >= 5.3: pidfds, SCM_RIGHTS), or, elsewhere, a fresh interpreter per worker.

``Zygote`` is the parent's end of ``worker._zygote_entry``; ``ForkedProcess`` gives a forked worker
(not the parent's child) Popen's kill/poll/wait through a pidfd. ``dsdr_eval.grading.pool`` schedules
the work.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from dsdr_eval.errors import DsdrError
from dsdr_eval.grading.worker import PipePair

WORKER_MEMORY_LIMIT_BYTES = 4 * 1024**3  # RLIMIT_AS per worker: 9^{9^{9^9}} must not eat the machine
WORKER_STARTUP_TIMEOUT_S = 180.0  # importing sympy/math-verify on a busy 2-core machine


def startup_timeout() -> DsdrError:
    return DsdrError(f"a math-verify worker did not start within {WORKER_STARTUP_TIMEOUT_S:.0f} s "
                     "(is math-verify installed?)")


def startup_exit(code: int) -> DsdrError:
    return DsdrError(f"a math-verify grading worker exited during start-up (exit code {code}); "
                     "check that math-verify is installed: python -c 'import math_verify'")


class ForkedProcess:
    """Popen's kill/poll/wait for a worker forked by the zygote. It is not our child, so it is
    watched through a pidfd, which (unlike a pid) can never name a recycled process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except OSError:  # already gone (and reaped)
            self._pidfd = None

    def poll(self) -> int | None:
        if self._pidfd is not None and not select.select([self._pidfd], [], [], 0)[0]:
            return None
        return -signal.SIGKILL  # the exit status belongs to the zygote

    def kill(self) -> None:
        if self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float | None = None) -> int:
        if self._pidfd is not None:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"grading worker {self.pid}", timeout or 0.0)
            os.close(self._pidfd)
            self._pidfd = None
        return -signal.SIGKILL


# Fork warm workers from one zygote where the platform has everything that needs (Linux >= 5.3);
# elsewhere each worker is a fresh interpreter.
CAN_FORK_WORKERS = (sys.platform.startswith("linux") and hasattr(os, "pidfd_open")
                     and hasattr(signal, "pidfd_send_signal") and hasattr(socket, "send_fds"))


def python_command(entry: str, *args: int) -> list[str]:
    # A fresh interpreter via subprocess (not multiprocessing's spawn/forkserver): those re-run
    # the caller's __main__, which breaks callers without an `if __name__ == "__main__"` guard.
    # `-c` puts the working directory first on sys.path: pin the worker to the parent's copy of
    # dsdr_eval, so a checkout (or stray folder) in the cwd can never supply the grader's code.
    package_root = str(Path(__file__).resolve().parents[2])
    code = (f"import sys; sys.path.insert(0, {package_root!r}); from dsdr_eval.grading.worker import {entry}; "
            f"{entry}(*(int(a) for a in sys.argv[1:]))")
    return [sys.executable, "-c", code, *(str(a) for a in args)]


class Zygote:
    """The parent's end of ``_zygote_entry``: started at once (its import overlaps the caller's
    extraction); ``fork`` waits for it to be warm the first time."""

    def __init__(self, inner_timeout_ms: int) -> None:
        ours, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            python_command("_zygote_entry", theirs.fileno(), inner_timeout_ms, WORKER_MEMORY_LIMIT_BYTES,
                            os.getpid()),
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, close_fds=True)
        theirs.close()
        self.control = ours
        self.ready = False
        self.started = time.monotonic()

    def fork(self, marker_fd: int) -> tuple[ForkedProcess, PipePair]:
        if not self.ready:
            self.control.settimeout(max(0.001, self.started + WORKER_STARTUP_TIMEOUT_S - time.monotonic()))
            try:
                greeting = self.control.recv(1)
            except socket.timeout:
                raise startup_timeout() from None
            if greeting != b"R":
                raise startup_exit(self.proc.wait())
            self.ready = True
            self.control.settimeout(WORKER_STARTUP_TIMEOUT_S)
        socket.send_fds(self.control, [b"F"], [marker_fd])
        message, fds, _, _ = socket.recv_fds(self.control, 8, 2)
        if len(message) != 8 or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            raise ConnectionError("the grading zygote did not fork a worker")
        return ForkedProcess(int.from_bytes(message, "little")), PipePair(fds[0], fds[1])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.control.close()
