"""The grading worker process: its pipes, its set-up, its serving loop, and the zygote that forks it.

A worker is a main thread (math-verify's ``signal.alarm`` timeouts need one) that receives problem
tasks over a pipe and streams results back (``dsdr_eval.grading.task``). It ignores Ctrl-C (the
parent's business), dies with its parent, and runs under an address-space limit. The zygote
(``_zygote_entry``) does that set-up and the math-verify import once, then forks ready workers.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from dsdr_eval.grading.marker import MarkerBoard
from dsdr_eval.grading.task import run_task

if TYPE_CHECKING:
    from dsdr_eval.grading.verifier import Verifier

_FLUSH_INTERVAL_S = 0.05


class PipePair:
    """Two one-way multiprocessing Connections over OS pipes, used like one duplex Connection."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.reader = Connection(read_fd, writable=False)
        self.writer = Connection(write_fd, readable=False)

    def send(self, obj: Any) -> None:
        self.writer.send(obj)

    def recv(self) -> Any:
        return self.reader.recv()

    def poll(self, timeout: float = 0.0) -> bool:
        return self.reader.poll(timeout)

    def close(self) -> None:
        for conn in (self.reader, self.writer):
            try:
                conn.close()
            except OSError:
                pass


def _die_with_parent(parent_pid: int) -> None:
    """Linux: SIGKILL this process when its parent ``parent_pid`` dies, even mid-computation (no
    orphans). The signal is armed only from here on: a parent that died earlier -- a fresh fork is
    scheduled late on a loaded machine, so its zygote can be killed first -- sends nothing, and the
    orphan would serve on (the zygote-death test failed so under load). Such a process exits now."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # after arming: a death from now on is signalled
        os._exit(0)


def _limit_memory(memory_limit_bytes: int | None) -> None:
    if not memory_limit_bytes:
        return
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    except (ImportError, ValueError, OSError):
        pass


def _prepare_worker_process(inner_timeout_s: float, memory_limit_bytes: int | None, parent_pid: int) -> "Verifier":
    """Signals, limits, math-verify import and warm-up of a worker (or of the zygote that forks
    workers) started by ``parent_pid`` -> the ``Verifier`` that ``run_task`` uses."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    _die_with_parent(parent_pid)
    _limit_memory(memory_limit_bytes)
    from dsdr_eval.grading.verifier import Verifier  # sympy + math-verify: workers only

    verifier = Verifier(inner_timeout_s)
    verifier.warm_up()
    return verifier


class _BatchingSender:
    """What ``run_task`` sends, batched into one pipe write per problem (a one-sample problem
    sends four messages, and every write wakes the parent: on 2 busy cores those wake-ups cost
    more than the grading). Buffered messages also go out whenever ``_FLUSH_INTERVAL_S`` has
    passed (the progress bar moves during a long problem). A worker killed while it held
    buffered results loses them; its marker (``dsdr_eval.grading.marker``) tells the parent
    which answer was in progress, so only that one is charged and the rest are rerun."""

    def __init__(self, conn: PipePair) -> None:
        self.conn = conn
        self.buffer: list[tuple] = []
        self.flushed_at = time.monotonic()

    def send(self, message: tuple) -> None:
        self.buffer.append(message)
        now = time.monotonic()
        if message[0] == "done" or now - self.flushed_at >= _FLUSH_INTERVAL_S:
            self.conn.send(self.buffer)
            self.buffer, self.flushed_at = [], now


def _serve(conn: PipePair, verifier: "Verifier", marker: MarkerBoard) -> None:
    """Loop: receive a problem task, stream results back; exit on None or a closed pipe."""
    conn.send(("ready", os.getpid()))
    sender = _BatchingSender(conn)
    while True:
        marker.idle()
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        run_task(task, sender, verifier, marker)


def _worker_entry(read_fd: int, write_fd: int, marker_fd: int, inner_timeout_ms: int, memory_limit_bytes: int,
                  parent_pid: int) -> None:
    """A worker in a fresh interpreter (platforms without fork support)."""
    verifier = _prepare_worker_process(inner_timeout_ms / 1000, memory_limit_bytes or None, parent_pid)
    _serve(PipePair(read_fd, write_fd), verifier, _marker_board(marker_fd))


def _marker_board(fd: int) -> MarkerBoard:
    board = MarkerBoard(fd)
    os.close(fd)  # the mapping stays
    return board


def _zygote_entry(control_fd: int, inner_timeout_ms: int, memory_limit_bytes: int, parent_pid: int) -> None:
    """A warmed-up template worker: imports math-verify once, then forks a ready worker per
    request (a byte and the worker's marker page on the control socket) and hands the parent the
    worker's pipe ends and pid (SCM_RIGHTS). Forking costs milliseconds, where each fresh interpreter costs ~2 s of CPU
    importing sympy -- the fixed cost that made small files slower than a serial loop (issue 16).
    The zygote is single-threaded and never grades, so forking it is safe."""
    verifier = _prepare_worker_process(inner_timeout_ms / 1000, memory_limit_bytes or None, parent_pid)
    control = socket.socket(fileno=control_fd)
    zygote_pid = os.getpid()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked workers are reaped by the kernel
    control.sendall(b"R")
    while True:
        try:
            request, fds, _, _ = socket.recv_fds(control, 1, 1)
        except OSError:
            return
        if not request or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return
        marker_fd = fds[0]
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: already imported and warm
            try:
                control.close()
                os.close(to_child_w)
                os.close(from_child_r)
                _die_with_parent(zygote_pid)  # cleared by fork; the zygote itself dies with the caller
                _serve(PipePair(to_child_r, from_child_w), verifier, _marker_board(marker_fd))
            finally:
                os._exit(0)
        os.close(to_child_r)
        os.close(from_child_w)
        os.close(marker_fd)
        try:
            socket.send_fds(control, [pid.to_bytes(8, "little")], [from_child_r, to_child_w])
        except OSError:
            return
        finally:
            os.close(from_child_r)
            os.close(to_child_w)
